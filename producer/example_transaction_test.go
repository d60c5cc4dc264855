package producer_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rocketry-go/rocketry/producer"
)

// A RocketMQ 5 transaction: the half message is kept from consumers until
// the commit. The checker answers the broker about a transaction left
// open (here, one whose order was saved).
func ExampleProducer_BeginTransaction() {
	b := startBroker()
	defer b.Stop()

	var saved sync.Map // the local transactions' outcomes, by order
	p, err := producer.New(b.Addr(),
		producer.WithProtocol(producer.RocketMQ5),
		producer.WithTransactionChecker(func(ctx context.Context, m *producer.Message) producer.TransactionResolution {
			if _, ok := saved.Load(m.Keys[0]); ok {
				return producer.TransactionCommit
			}
			return producer.TransactionRollback
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close(context.Background())

	ctx := context.Background()
	tx, err := p.BeginTransaction(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := tx.Send(ctx, &producer.Message{Topic: "orders", Keys: []string{"order-1"}, Body: []byte("paid")}); err != nil {
		fmt.Println(err) // a *producer.TransactionError: which step, and whether the check resolves it
		return
	}
	fmt.Println("before the commit:", len(b.Messages("orders")), "visible,", len(b.HalfMessages("orders")), "half")
	saved.Store("order-1", true) // the local transaction
	if err := tx.Commit(ctx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("after the commit:", len(b.Messages("orders")), "visible,", len(b.HalfMessages("orders")), "half")
	// Output:
	// before the commit: 0 visible, 1 half
	// after the commit: 1 visible, 0 half
}

// A timed message recalled before its delivery time is never delivered.
func ExampleProducer_Recall() {
	b := startBroker()
	defer b.Stop()

	p, err := producer.New(b.Addr(), producer.WithProtocol(producer.RocketMQ5))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close(context.Background())

	ctx := context.Background()
	m := &producer.Message{Topic: "reminders", Body: []byte("call back"), DeliveryTime: time.Now().Add(time.Hour)}
	r, err := p.Send(ctx, m)
	if err != nil {
		fmt.Println(err)
		return
	}
	id, err := p.Recall(ctx, "reminders", r.RecallHandle)
	fmt.Println(id == m.ID, err, len(b.Messages("reminders")))
	// Output: true <nil> 0
}
