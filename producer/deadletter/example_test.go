package deadletter_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/producer"
	"github.com/rocketry-go/rocketry/producer/deadletter"
)

// A producer hands what it cannot send to the store; once the broker is
// back, a replay sends it there and empties the store.
func Example() {
	dir, _ := os.MkdirTemp("", "deadletter-example")
	defer os.RemoveAll(dir)
	b, _ := broker.New(broker.WithFaults(broker.Faults{Unavailable: true}))
	_ = b.Start("127.0.0.1:0")
	defer b.Stop()

	store, err := deadletter.Open(filepath.Join(dir, "dead.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	p, _ := producer.New(b.Addr(), producer.WithDeadLetterSink(store), producer.WithAttemptTimeout(time.Second))
	_, err = p.Send(context.Background(), &producer.Message{ID: "order-1", Topic: "orders", Body: []byte("1 apple")})
	fmt.Println("send failed:", err != nil)
	_ = p.Close(context.Background())
	n, _ := store.Len()
	fmt.Println("kept:", n)

	_ = b.SetFaults(broker.Faults{})
	rp, _ := producer.New(b.Addr())
	defer rp.Close(context.Background())
	res, err := store.Replay(context.Background(), rp, deadletter.ReplayOptions{})
	n, _ = store.Len()
	fmt.Println("replayed:", res.Stored, err, "left:", n)
	// Output:
	// send failed: true
	// kept: 1
	// replayed: 1 <nil> left: 0
}
