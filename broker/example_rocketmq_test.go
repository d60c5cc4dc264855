package broker_test

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rocketry-go/rocketry/broker"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
)

// A RocketMQ 5 (apache.rocketmq.v2) client on the same address as
// rocketry.v1: a route, a send, its retry (stored again: a RocketMQ broker
// does not deduplicate), a batch answered with one entry, and a refused
// batch; the send observer sees every message of every request.
func Example_rocketMQ() {
	b, err := broker.New(broker.WithQueues(2), broker.WithMaxBodyBytes(8),
		broker.WithSendObserver(func(r broker.SendRecord) {
			fmt.Printf("  observed %s %s: %s\n", r.Protocol, r.MessageID, strings.TrimSpace(r.Result+" "+r.Reason))
		}))
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
	client := rocketmqv2.NewMessagingServiceClient(conn)
	ctx := context.Background()

	route, err := client.QueryRoute(ctx, &rocketmqv2.QueryRouteRequest{Topic: &rocketmqv2.Resource{Name: "orders"}})
	if err != nil {
		panic(err)
	}
	for _, q := range route.MessageQueues {
		fmt.Println("queue", q.Id, q.Permission, q.Broker.Name, q.Broker.Endpoints.Addresses[0].Host)
	}
	message := func(id, body string) *rocketmqv2.Message {
		return &rocketmqv2.Message{
			Topic:            &rocketmqv2.Resource{Name: "orders"},
			SystemProperties: &rocketmqv2.SystemProperties{MessageId: id},
			Body:             []byte(body),
		}
	}
	for _, msgs := range [][]*rocketmqv2.Message{
		{message("order-1", "one")},
		{message("order-1", "one")}, // a retry: stored again, on the next queue
		{message("order-2", "two"), message("order-3", "three")},
		{message("order-4", "four"), message("order-5", "far too long")},
	} {
		resp, err := client.SendMessage(ctx, &rocketmqv2.SendMessageRequest{Messages: msgs})
		if err != nil {
			panic(err)
		}
		fmt.Println("send:", resp.Status.Code, resp.Status.Message)
		for _, e := range resp.Entries {
			fmt.Println("  entry", e.MessageId, e.Status.Code, e.Offset)
		}
	}
	s := b.Stats()
	fmt.Println("stored", s.Stored, "copies", s.Copies, "stored twice", s.StoredTwice)
	// Output:
	// queue 0 READ_WRITE broker-0 127.0.0.1
	// queue 1 READ_WRITE broker-0 127.0.0.1
	//   observed apache.rocketmq.v2 order-1: stored
	// send: OK OK
	//   entry order-1 OK 0
	//   observed apache.rocketmq.v2 order-1: stored
	// send: OK OK
	//   entry order-1 OK 0
	//   observed apache.rocketmq.v2 order-2: stored
	//   observed apache.rocketmq.v2 order-3: stored
	// send: OK OK
	//   entry order-2,order-3 OK 1
	//   observed apache.rocketmq.v2 order-4: bad_request MESSAGE_TOO_LARGE
	//   observed apache.rocketmq.v2 order-5: bad_request MESSAGE_TOO_LARGE
	// send: MESSAGE_BODY_TOO_LARGE message body cannot exceed the max 8
	// stored 4 copies 1 stored twice 1
}
