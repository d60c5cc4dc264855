package pacesim

import (
	"fmt"
	"testing"
	"time"
)

func TestDbgQueue(t *testing.T) {
	debugAttempts = func(arrive, wait time.Duration, err error) {
		if arrive > 1950*time.Millisecond && arrive < 2150*time.Millisecond {
			fmt.Printf("%v wait %v %v\n", arrive, wait, err != nil)
		}
	}
	defer func() { debugAttempts = nil }()
	sc := Shapes(5 * time.Second)["queue-200"]
	sc.Seed = 1
	Run(sc)
}
