package pacesim

import (
	"fmt"
	"os"
	"testing"
	"time"
)

func TestDbg(t *testing.T) {
	from, _ := time.ParseDuration(os.Getenv("DBG_FROM"))
	to, _ := time.ParseDuration(os.Getenv("DBG_TO"))
	debugAttempts = func(arrive, wait time.Duration, err error) {
		if arrive > from && arrive < to {
			fmt.Printf("%v wait %v %v\n", arrive, wait, err != nil)
		}
	}
	defer func() { debugAttempts = nil }()
	sc := Shapes(5 * time.Second)[os.Getenv("DBG_SHAPE")]
	sc.Seed = 1
	Run(sc)
}
