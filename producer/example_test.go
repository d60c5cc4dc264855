package producer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rocketry-go/rocketry/broker"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/producer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// startBroker starts a test broker on 127.0.0.1:0.
func startBroker(opts ...broker.Option) *broker.Broker {
	b, err := broker.New(opts...)
	if err != nil {
		panic(err)
	}
	if err := b.Start("127.0.0.1:0"); err != nil {
		panic(err)
	}
	return b
}

func Example() {
	b := startBroker()
	defer b.Stop()

	p, err := producer.New(b.Addr())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close(context.Background())

	r, err := p.Send(context.Background(), &producer.Message{Topic: "orders", Body: []byte("order 1")})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("stored after %d attempt(s), duplicate %v\n", r.Attempts, r.Duplicate)
	// Output: stored after 1 attempt(s), duplicate false
}

// A broker that is down: the send is retried at once, twice, then handed
// to the fallback, and the observer sees every step.
func ExampleWithObserver() {
	b := startBroker(broker.WithFaults(broker.Faults{Unavailable: true}))
	defer b.Stop()

	p, err := producer.New(b.Addr(),
		producer.WithMaxAttempts(3),
		producer.WithObserver(func(e producer.Event) {
			switch e.Kind {
			case producer.EventRetry:
				fmt.Printf("%v %d: %s, next after %v\n", e.Kind, e.Attempt, e.Why, e.Delay)
			default:
				fmt.Printf("%v %d\n", e.Kind, e.Attempt)
			}
		}),
		producer.WithFallback(func(m *producer.Message, err error) {
			fmt.Printf("fallback: %s\n", m.Body)
		}),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close(context.Background())

	_, err = p.Send(context.Background(), &producer.Message{Topic: "orders", Body: []byte("order 2")})
	var se *producer.SendError
	if errors.As(err, &se) {
		fmt.Println(errors.Is(err, producer.ErrAttemptsExhausted), se.Attempts, se.Code, se.DeadLettered)
	}
	// Output:
	// attempt 1
	// retry 1: failed-not-stored, next after 0s
	// attempt 2
	// retry 2: failed-not-stored, next after 0s
	// attempt 3
	// fallback: order 2
	// exhausted 3
	// dead-letter 3
	// true 3 UNAVAILABLE true
}

func ExampleProducer_SendAsync() {
	b := startBroker()
	defer b.Stop()

	p, err := producer.New(b.Addr(), producer.WithMaxInFlight(64))
	if err != nil {
		fmt.Println(err)
		return
	}
	var mu sync.Mutex
	stored := 0
	for i := range 100 {
		m := &producer.Message{Topic: "orders", Body: fmt.Appendf(nil, "order %d", i)}
		// The callback runs once, on a producer goroutine; it must not block.
		if err := p.SendAsync(context.Background(), m, func(r *producer.SendReceipt, err error) {
			if err == nil {
				mu.Lock()
				stored++
				mu.Unlock()
			}
		}); err != nil {
			fmt.Println(err)
		}
	}
	// Close waits for the sends in flight and their callbacks.
	if err := p.Close(context.Background()); err != nil {
		fmt.Println(err)
	}
	fmt.Println("stored", stored)
	// Output: stored 100
}

func ExampleUnaryClientInterceptor() {
	b := startBroker()
	defer b.Stop()

	cc, err := grpc.NewClient(b.Addr(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(producer.UnaryClientInterceptor(producer.WithMaxAttempts(5))),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cc.Close()

	client := rocketryv1.NewMessagingServiceClient(cc)
	resp, err := client.SendMessage(context.Background(),
		&rocketryv1.SendMessageRequest{Messages: []*rocketryv1.Message{{MessageId: "order-3", Topic: "orders", Body: []byte("order 3")}}},
		producer.WithCallOptions(producer.WithMaxAttempts(2)), // this call only
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.GetResults()[0].GetMessageId())
	// Output: order-3
}
