package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// syncBuffer is a bytes.Buffer safe for a command writing while the test
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fakeSignals makes signalContext return a context the test cancels, as a
// SIGINT would.
func fakeSignals(t *testing.T) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	old := signalContext
	signalContext = func() (context.Context, context.CancelFunc) { return ctx, func() {} }
	t.Cleanup(func() { signalContext = old; cancel() })
	return cancel
}

func TestBrokerCommand(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	interrupt := fakeSignals(t)
	var out, errb syncBuffer
	done := make(chan int)
	go func() {
		done <- run([]string{"broker", "--listen", "127.0.0.1:0", "--queues", "2", "--stats-interval", "5ms",
			"--max-backlog", "100", "--seed", "7", "--log-level", "debug"}, &out, &errb)
	}()
	var addr string
	for range 5000 {
		if s := out.String(); strings.Contains(s, "listening on ") {
			addr = strings.Fields(strings.SplitN(s, "listening on ", 2)[1])[0]
			break
		}
		time.Sleep(time.Millisecond)
	}
	if addr == "" {
		t.Fatalf("rocketry broker printed %q, stderr %q; want its address", out.String(), errb.String())
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rocketryv1.NewMessagingServiceClient(conn).SendMessage(context.Background(), &rocketryv1.SendMessageRequest{
		Messages: []*rocketryv1.Message{{Topic: "t", MessageId: "a"}, {Topic: "t", MessageId: "b"}},
	})
	conn.Close()
	if err != nil || len(resp.Results) != 2 {
		t.Fatalf("SendMessage to rocketry broker = %v, %v; want 2 results", resp, err)
	}
	var sout, serr bytes.Buffer
	if code := run([]string{"stats", "--addr", addr}, &sout, &serr); code != 0 || !strings.Contains(sout.String(), "stored 2,") {
		t.Errorf("rocketry stats = %d, %q, %q; want 0 and stored 2", code, sout.String(), serr.String())
	}
	if want := "apache.rocketmq.v2 endpoint for RocketMQ 5 clients: " + addr; !strings.Contains(out.String(), want) {
		t.Errorf("rocketry broker printed %q; want a line with %q", out.String(), want)
	}
	time.Sleep(10 * time.Millisecond)
	interrupt()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("rocketry broker after SIGINT = %d; want 0 (stderr %q)", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("rocketry broker did not stop after SIGINT")
	}
	for _, want := range []string{"broker: stats", "stored=2", "broker: shutting down", "broker: stopped"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("rocketry broker log = %q; want it to contain %q", errb.String(), want)
		}
	}
}

func TestCommandBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"broker", "--queues", "0"}, "WithQueues"},
		{[]string{"broker", "--internal-rate", "2"}, "InternalRate"},
		{[]string{"broker", "--max-backlog", "10", "--backlog-low-water", "20"}, "BacklogLowWater"},
		{[]string{"broker", "--latency", "soon"}, "-latency"},
		{[]string{"broker", "--log-level", "loud"}, "--log-level"},
		{[]string{"broker", "extra"}, "unexpected argument"},
		{[]string{"broker", "--nope"}, "nope"},
		{[]string{"consume"}, "--topic is required"},
		{[]string{"consume", "--topic", "t", "--rate", "-1"}, "--rate"},
		{[]string{"consume", "--topic", "t", "--reset-offset", "-2"}, "--reset-offset"},
		{[]string{"consume", "--topic", "t", "--count", "-1"}, "--count"},
		{[]string{"consume", "--topic", "t", "--batch", "0"}, "--batch"},
		{[]string{"stats", "--timeout", "0s"}, "--timeout"},
		{[]string{"stats", "--json=maybe"}, "json"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tc.args, &out, &errb)
			if code != 2 || strings.Count(errb.String(), "\n") != 1 || !strings.Contains(errb.String(), tc.want) {
				t.Errorf("run(%q) = %d, stderr %q; want 2 and one line containing %q", tc.args, code, errb.String(), tc.want)
			}
		})
	}
}

func TestCommandHelp(t *testing.T) {
	for _, name := range []string{"broker", "consume", "stats"} {
		var out, errb bytes.Buffer
		if code := run([]string{name, "-h"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "usage: rocketry "+name) {
			t.Errorf("run(%s -h) = %d, %q; want 0 and the usage", name, code, out.String())
		}
	}
}
