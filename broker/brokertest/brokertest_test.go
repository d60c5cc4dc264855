package brokertest_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStart(t *testing.T) {
	b := brokertest.Start(t, broker.WithQueues(1))
	conn, err := grpc.NewClient(b.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := rocketryv1.NewMessagingServiceClient(conn).SendMessage(context.Background(), &rocketryv1.SendMessageRequest{
		Messages: []*rocketryv1.Message{{Topic: "t", MessageId: "a"}},
	})
	if err != nil || resp.Results[0].Offset != 0 {
		t.Fatalf("SendMessage = %v, %v; want offset 0", resp, err)
	}
	if got := b.Stats().Stored; got != 1 {
		t.Errorf("Stats().Stored = %d; want 1", got)
	}
}

// fatalTB records Fatalf instead of stopping the test.
type fatalTB struct {
	testing.TB
	failed string
}

func (f *fatalTB) Fatalf(format string, args ...any) { f.failed = format }

func TestStartBadOption(t *testing.T) {
	f := &fatalTB{TB: t}
	brokertest.Start(f, broker.WithQueues(0))
	if f.failed == "" {
		t.Errorf("Start(WithQueues(0)) did not call Fatalf")
	}
}

func TestStartCluster(t *testing.T) {
	bs := brokertest.StartCluster(t, 2, broker.WithQueues(1))
	if len(bs) != 2 || bs[0].Addr() == bs[1].Addr() {
		t.Fatalf("StartCluster(2) = %d brokers; want 2 on two addresses", len(bs))
	}
	conn, err := grpc.NewClient(bs[1].Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := rocketmqv2.NewMessagingServiceClient(conn).QueryRoute(context.Background(),
		&rocketmqv2.QueryRouteRequest{Topic: &rocketmqv2.Resource{Name: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, q := range resp.MessageQueues {
		a := q.Broker.Endpoints.Addresses[0]
		got = append(got, fmt.Sprintf("%s@%s:%d", q.Broker.Name, a.Host, a.Port))
	}
	want := []string{"broker-1@" + bs[1].Addr(), "broker-0@" + bs[0].Addr()}
	if !slices.Equal(got, want) {
		t.Errorf("QueryRoute on broker-1 = %v; want %v", got, want)
	}
	f := &fatalTB{TB: t}
	if bs := brokertest.StartCluster(f, 0); bs != nil || f.failed == "" {
		t.Errorf("StartCluster(0) = %v and did not call Fatalf", bs)
	}
}
