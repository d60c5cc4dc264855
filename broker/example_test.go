package broker_test

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/broker"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// Store a message, send it again, and read it as a consumer group.
func Example() {
	b, err := broker.New(broker.WithQueues(2))
	if err != nil {
		panic(err)
	}
	if err := b.Start("127.0.0.1:0"); err != nil {
		panic(err)
	}
	defer b.Stop()
	conn, err := grpc.NewClient(b.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	producer := rocketryv1.NewMessagingServiceClient(conn)
	consumer := rocketryv1.NewConsumerServiceClient(conn)
	ctx := context.Background()

	req := &rocketryv1.SendMessageRequest{Messages: []*rocketryv1.Message{
		{Topic: "orders", MessageId: "order-1", Body: []byte("one")},
		{Topic: "orders", MessageId: "order-2", Body: []byte("two")},
	}}
	for range 2 { // the second send is a retry: nothing is stored twice
		resp, err := producer.SendMessage(ctx, req)
		if err != nil {
			panic(err)
		}
		for _, r := range resp.Results {
			fmt.Printf("%s: queue %d offset %d duplicate %v\n", r.MessageId, r.QueueId, r.Offset, r.Duplicate)
		}
	}
	got, err := consumer.ReceiveMessages(ctx, &rocketryv1.ReceiveMessagesRequest{Topic: "orders", Group: "billing", AutoCommit: true})
	if err != nil {
		panic(err)
	}
	for _, m := range got.Messages {
		fmt.Printf("received %s %q\n", m.Message.MessageId, m.Message.Body)
	}
	fmt.Println("stored:", b.Stats().Stored, "duplicates:", b.Stats().Duplicates)
	// Output:
	// order-1: queue 0 offset 0 duplicate false
	// order-2: queue 1 offset 0 duplicate false
	// order-1: queue 0 offset 0 duplicate true
	// order-2: queue 1 offset 0 duplicate true
	// received order-1 "one"
	// received order-2 "two"
	// stored: 2 duplicates: 2
}

// Throttle for backlog: once a group is more than MaxBacklog messages
// behind, sends are refused with 530 BACKLOG until it catches up.
func ExampleThrottle() {
	b, _ := broker.New(broker.WithThrottle(broker.Throttle{MaxBacklog: 2}))
	if err := b.Start("127.0.0.1:0"); err != nil {
		panic(err)
	}
	defer b.Stop()
	conn, _ := grpc.NewClient(b.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	producer := rocketryv1.NewMessagingServiceClient(conn)
	consumer := rocketryv1.NewConsumerServiceClient(conn)
	ctx := context.Background()

	// A group that has read nothing yet.
	consumer.ReceiveMessages(ctx, &rocketryv1.ReceiveMessagesRequest{Topic: "t", Group: "g", AutoCommit: true})
	for i := range 4 {
		_, err := producer.SendMessage(ctx, &rocketryv1.SendMessageRequest{Messages: []*rocketryv1.Message{
			{Topic: "t", MessageId: fmt.Sprint(i)},
		}})
		if err != nil {
			d := status.Convert(err).Details()[0].(*rocketryv1.ErrorDetail)
			fmt.Println(i, status.Code(err), d.Code, d.Reason)
			continue
		}
		fmt.Println(i, "stored")
	}
	// Output:
	// 0 stored
	// 1 stored
	// 2 stored
	// 3 ResourceExhausted CODE_TOO_MANY_REQUESTS THROTTLE_REASON_BACKLOG
}
