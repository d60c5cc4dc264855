package brokertest_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
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
