package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// syncBuffer is a bytes.Buffer safe for a command writing while the test
// reads.
type syncBuffer struct {
	mu   sync.Mutex
	b    bytes.Buffer
	news chan struct{} // closed (and dropped) by the next Write
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.news != nil {
		close(s.news)
		s.news = nil
	}
	return s.b.Write(p)
}

// written is closed by the next Write.
func (s *syncBuffer) written() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.news == nil {
		s.news = make(chan struct{})
	}
	return s.news
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
	addr := waitPrinted(t, &out, &errb, "listening on ")[0]
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
	if want := "listening on " + addr + " (rocketry.v1, and apache.rocketmq.v2 for RocketMQ 5 clients)\n"; !strings.Contains(out.String(), want) {
		t.Errorf("rocketry broker printed %q; want a line with %q", out.String(), want)
	}
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

// startBrokerCommand runs "rocketry broker args..." until the test ends
// (stop, or its cleanup, interrupts it) and returns its stdout once it
// listens.
func startBrokerCommand(t *testing.T, args ...string) (out *syncBuffer, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	old := signalContext
	signalContext = func() (context.Context, context.CancelFunc) { return ctx, func() {} }
	out = &syncBuffer{}
	var errb syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(append([]string{"broker"}, args...), out, &errb) }()
	interrupt := func() {
		cancel()
		select {
		case code := <-done:
			assert.Equal(t, 0, code, "rocketry broker %v after SIGINT; stderr %q", args, errb.String())
		case <-time.After(10 * time.Second):
			t.Errorf("rocketry broker %v did not stop after SIGINT", args)
		}
	}
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "listening on ") }, 5*time.Second, time.Millisecond,
		"rocketry broker %v printed %q, stderr %q", args, out.String(), errb.String())
	signalContext = old
	var once sync.Once
	t.Cleanup(func() { once.Do(interrupt) })
	return out, func() { once.Do(interrupt) }
}

// TestBrokerPeers runs two broker processes' worth of commands, each
// naming the other with --peers: each answers QueryRoute with the queues of
// both, and a RocketMQ 5 producer pointed at one spreads its sends over the
// two.
func TestBrokerPeers(t *testing.T) {
	leakCheck(t)
	withStdin(t, "", true)
	a0, a1 := deadAddress(t), deadAddress(t)
	out0, stop0 := startBrokerCommand(t, "--listen", a0, "--queues", "2", "--name", "broker-0", "--peers", "broker-1="+a1, "--stats-interval", "0")
	out1, stop1 := startBrokerCommand(t, "--listen", a1, "--queues", "2", "--name", "broker-1", "--peers", "broker-0="+a0, "--stats-interval", "0")
	assert.Contains(t, out0.String(), "rocketry broker: apache.rocketmq.v2 routes list broker-0 (this one), broker-1 at "+a1+"\n")
	assert.Contains(t, out1.String(), "rocketry broker: apache.rocketmq.v2 routes list broker-1 (this one), broker-0 at "+a0+"\n")

	for _, addr := range []string{a0, a1} {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		resp, err := rocketmqv2.NewMessagingServiceClient(conn).QueryRoute(context.Background(),
			&rocketmqv2.QueryRouteRequest{Topic: &rocketmqv2.Resource{Name: "orders"}})
		conn.Close()
		require.NoError(t, err)
		queues := map[string]int{}
		for _, q := range resp.GetMessageQueues() {
			br := q.GetBroker()
			ep := br.GetEndpoints().GetAddresses()[0]
			queues[fmt.Sprintf("%s@%s:%d", br.GetName(), ep.GetHost(), ep.GetPort())]++
		}
		assert.Equal(t, map[string]int{"broker-0@" + a0: 2, "broker-1@" + a1: 2}, queues, "QueryRoute at %s", addr)
	}

	var pout, perr bytes.Buffer
	code := run([]string{"produce", "--addr", a0, "--topic", "orders", "--count", "40", "--protocol", "rocketmq"}, &pout, &perr)
	require.Equal(t, 0, code, "produce over the two brokers: stdout %q, stderr %q", pout.String(), perr.String())
	stats := func(addr string) string {
		var sout, serr bytes.Buffer
		require.Equal(t, 0, run([]string{"stats", "--addr", addr, "--json"}, &sout, &serr), "stats %s: %q", addr, serr.String())
		return sout.String()
	}
	s0, s1 := stats(a0), stats(a1)
	n0, n1 := storedOf(t, s0), storedOf(t, s1)
	assert.Equal(t, int64(40), n0+n1, "stored over the two brokers (%s / %s)", s0, s1)
	assert.Positive(t, n0, "stored on broker-0")
	assert.Positive(t, n1, "stored on broker-1")
	stop0()
	stop1()
}

// storedOf reads "stored" from rocketry stats --json output.
func storedOf(t *testing.T, statsJSON string) int64 {
	t.Helper()
	var s struct {
		Stored int64 `json:"stored"`
	}
	require.NoError(t, json.Unmarshal([]byte(statsJSON), &s), "stats --json: %s", statsJSON)
	return s.Stored
}

func TestBrokerPeersBadFlags(t *testing.T) {
	dead := deadAddress(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--peers", "broker-1"}, `--peers "broker-1": entry "broker-1" is not NAME=HOST:PORT`},
		{[]string{"--peers", "=127.0.0.1:7778"}, "is not NAME=HOST:PORT"},
		{[]string{"--peers", "broker-1=127.0.0.1"}, `address "127.0.0.1" of broker-1 is not HOST:PORT`},
		{[]string{"--peers", "broker-1=:7778"}, "is not HOST:PORT"},
		{[]string{"--peers", "broker-1=127.0.0.1:99999"}, "is not HOST:PORT"},
		{[]string{"--peers", "broker-0=127.0.0.1:7778"}, "broker-0 is this broker's --name"},
		{[]string{"--name", "b", "--peers", "b=127.0.0.1:7778"}, "b is this broker's --name"},
		{[]string{"--peers", "broker-1=127.0.0.1:7778,broker-1=127.0.0.1:7779"}, "name broker-1 given twice"},
		{[]string{"--peers", "broker-1=127.0.0.1:7778,broker-2=127.0.0.1:7778"}, "address 127.0.0.1:7778 given twice"},
		{[]string{"--peers", "broker 1=127.0.0.1:7778"}, `name "broker 1" must have no space`},
		{[]string{"--peers", "broker-1=127.0.0.1:7778,"}, `entry "" is not NAME=HOST:PORT`},
		{[]string{"--name", ""}, `--name "": must be 1 to 255 bytes`},
		{[]string{"--name", "a b"}, `--name "a b": must have no space`},
	} {
		checkRefused(t, append([]string{"broker", "--listen", dead}, tc.args...), 2, tc.want)
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

// waitPrinted waits (up to 5 s) until a running command has printed every
// marker on out, and returns the word after each.
func waitPrinted(t *testing.T, out, errb *syncBuffer, markers ...string) []string {
	t.Helper()
	for deadline := time.After(5 * time.Second); ; {
		written := out.written() // before the read: a write after it is seen
		s := out.String()
		words := make([]string, 0, len(markers))
		for _, m := range markers {
			if _, after, ok := strings.Cut(s, m); ok && len(strings.Fields(after)) > 0 {
				words = append(words, strings.Fields(after)[0])
			}
		}
		if len(words) == len(markers) {
			return words
		}
		select {
		case <-written:
		case <-deadline:
			t.Fatalf("the command printed %q, stderr %q; want %q", out.String(), errb.String(), markers)
		}
	}
}
