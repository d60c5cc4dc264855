package brokertest_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// TestStartTLS: the broker serves TLS with a certificate the returned
// configuration trusts, and refuses a plaintext client.
func TestStartTLS(t *testing.T) {
	b, cfg := brokertest.StartTLS(t, broker.WithQueues(1))
	send := func(creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(b.Addr(), grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = rocketryv1.NewMessagingServiceClient(conn).SendMessage(context.Background(), &rocketryv1.SendMessageRequest{
			Messages: []*rocketryv1.Message{{Topic: "t", MessageId: "a"}},
		})
		return err
	}
	if err := send(credentials.NewTLS(cfg)); err != nil {
		t.Fatalf("SendMessage over TLS = %v; want success", err)
	}
	if err := send(insecure.NewCredentials()); err == nil {
		t.Errorf("SendMessage in plaintext to a TLS broker succeeded; want an error")
	}
	if got := b.Stats().Stored; got != 1 {
		t.Errorf("Stats().Stored = %d; want 1", got)
	}
}

func TestStartTLSBadOption(t *testing.T) {
	f := &fatalTB{TB: t}
	brokertest.StartTLS(f, broker.WithQueues(0))
	if f.failed == "" {
		t.Errorf("StartTLS(WithQueues(0)) did not call Fatalf")
	}
}
