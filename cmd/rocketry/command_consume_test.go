package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// startFilledBroker starts a test broker holding n messages of topic t.
func startFilledBroker(t *testing.T, n int, opts ...broker.Option) *broker.Broker {
	t.Helper()
	b := brokertest.Start(t, opts...)
	if n == 0 {
		return b
	}
	conn, err := grpc.NewClient(b.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &rocketryv1.SendMessageRequest{}
	for i := range n {
		req.Messages = append(req.Messages, &rocketryv1.Message{Topic: "t", MessageId: fmt.Sprint(i), Body: []byte("x")})
	}
	if _, err := rocketryv1.NewMessagingServiceClient(conn).SendMessage(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConsumeCommand(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	fakeSignals(t)
	b := startFilledBroker(t, 20, broker.WithQueues(2))
	for _, tc := range []struct {
		name string
		args []string
		want int
		left int64 // the group's backlog after
	}{
		{"count", []string{"--count", "5", "--batch", "2"}, 5, 15},
		{"until idle for the duration", []string{"--duration", "50ms", "--quiet"}, 15, 0},
		{"reset to 0 re-reads all", []string{"--reset-offset", "0", "--count", "20", "--rate", "1000", "--quiet"}, 20, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"consume", "--addr", b.Addr(), "--topic", "t", "--group", "g", "--poll", "5ms"}, tc.args...)
			if code := run(args, &out, &errb); code != 0 {
				t.Fatalf("run(%q) = %d, stderr %q; want 0", args, code, errb.String())
			}
			if want := fmt.Sprintf("received %d messages", tc.want); !strings.Contains(out.String(), want) {
				t.Errorf("run(%q) printed %q; want %q", args, out.String(), want)
			}
			if got := b.Stats().Topics[0].Groups[0].Backlog; got != tc.left {
				t.Errorf("group backlog after %q = %d; want %d", args, got, tc.left)
			}
		})
	}
	var out, errb bytes.Buffer
	run([]string{"consume", "--addr", b.Addr(), "--topic", "t", "--group", "lines", "--count", "1"}, &out, &errb)
	if !strings.Contains(out.String(), "queue 0 offset 0 id 0") {
		t.Errorf("consume printed %q; want a line for queue 0 offset 0 id 0", out.String())
	}
}

func TestConsumeCommandFailure(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	fakeSignals(t)
	b := brokertest.Start(t, broker.WithAutoCreateTopics(false))
	var out, errb bytes.Buffer
	if code := run([]string{"consume", "--addr", b.Addr(), "--topic", "missing", "--count", "1"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "NotFound") {
		t.Errorf("consume of a missing topic = %d, %q; want 1 and NotFound", code, errb.String())
	}
}
