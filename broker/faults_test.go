package broker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

func TestFaultInternal(t *testing.T) {
	b, c := start(t, broker.WithFaults(broker.Faults{InternalRate: 1}))
	_, err := send(t, c, msg("t", "a"))
	wantRefusal(t, err, codes.Internal, rocketryv1.Code_CODE_INTERNAL_ERROR, 0)
	if s := b.Stats(); s.Stored != 0 || s.Faults["internal"] != 1 {
		t.Errorf("Stats() stored %d faults %v; want 0, internal 1", s.Stored, s.Faults)
	}
	b.SetFaults(broker.Faults{})
	mustSend(t, c, msg("t", "a"))
}

// TestFaultStoredInternal: a StoredInternalRate fault stores the messages
// and answers INTERNAL all the same, on both faces. rocketry.v1
// deduplicates, so the client's resend is answered as a duplicate;
// apache.rocketmq.v2 (the faithful face) answers 50001 as a proxy whose
// broker wrote the messages, and a resend is a copy that Stats counts.
func TestFaultStoredInternal(t *testing.T) {
	t.Run("rocketry.v1", func(t *testing.T) {
		b, c := start(t, broker.WithFaults(broker.Faults{StoredInternalRate: 1}))
		_, err := send(t, c, msg("t", "a"), msg("t", "b"))
		wantRefusal(t, err, codes.Internal, rocketryv1.Code_CODE_INTERNAL_ERROR, 0)
		s := b.Stats()
		assert.Equal(t, int64(2), s.Stored, "stored before the answer failed")
		assert.Equal(t, int64(1), s.Faults["stored_internal"])
		assert.Zero(t, s.Faults["internal"])
		require.NoError(t, b.SetFaults(broker.Faults{}))
		resp := mustSend(t, c, msg("t", "a"), msg("t", "b"))
		assert.True(t, resp.Results[0].Duplicate && resp.Results[1].Duplicate, "the resend is answered as a duplicate: %v", resp.Results)
		assert.Equal(t, int64(2), b.Stats().Stored)
	})
	t.Run("apache.rocketmq.v2", func(t *testing.T) {
		var mu sync.Mutex
		var recs []broker.SendRecord
		b := brokertest.Start(t, broker.WithFaults(broker.Faults{StoredInternalRate: 1}),
			broker.WithSendObserver(func(r broker.SendRecord) { mu.Lock(); recs = append(recs, r); mu.Unlock() }))
		c := dialV2(t, b.Addr())
		resp := v2send(t, c, v2msg("t", "a"), v2msg("t", "b"))
		assert.Equal(t, []rocketmqv2.Code{v2Intern}, v2codes(resp))
		assert.Contains(t, resp.Status.Message, "after the messages were stored")
		assert.Len(t, b.Messages("t"), 2, "stored before the answer failed")
		require.NoError(t, b.SetFaults(broker.Faults{}))
		assert.Equal(t, []rocketmqv2.Code{v2OK, v2OK}, v2codes(v2send(t, c, v2msg("t", "a"))))
		s := b.Stats()
		assert.Equal(t, int64(3), s.Stored)
		assert.Equal(t, int64(1), s.Copies, "the resend of a is a copy")
		assert.Equal(t, int64(1), s.StoredTwice)
		assert.Equal(t, int64(1), s.Faults["stored_internal"])
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, recs, 3)
		assert.Equal(t, broker.SendRecord{Protocol: broker.ProtocolRocketMQV2, MessageID: "a", Topic: "t", Time: recs[0].Time,
			Result: broker.SendFault, Reason: "stored_internal"}, recs[0])
		assert.Equal(t, broker.SendStored, recs[2].Result)
	})
	t.Run("throttled first", func(t *testing.T) {
		clock := newFakeClock()
		b, c := start(t, broker.WithClock(clock.Now), broker.WithThrottle(broker.Throttle{MaxSendRate: 1}))
		mustSend(t, c, msg("t", "x")) // the one token of the second
		require.NoError(t, b.SetFaults(broker.Faults{StoredInternalRate: 1}))
		_, err := send(t, c, msg("t", "a")) // throttled: nothing stored
		wantRefusal(t, err, codes.ResourceExhausted, rocketryv1.Code_CODE_TOO_MANY_REQUESTS, rocketryv1.ThrottleReason_THROTTLE_REASON_SEND_RATE)
		s := b.Stats()
		assert.Equal(t, int64(1), s.Stored)
		assert.Zero(t, s.Faults["stored_internal"], "counted only when stored")
	})
}

// TestFaultLatency: the injected latency holds every answer back, past a
// caller's deadline shorter than it (no clock is read: the call's own
// deadline says the answer came late), and a caller that waits longer
// gets it.
func TestFaultLatency(t *testing.T) {
	const latency = 300 * time.Millisecond
	b, c := start(t, broker.WithFaults(broker.Faults{Latency: latency}))
	mustSend(t, c, msg("t", "warm")) // connected: the next call's deadline is the latency's alone
	short, cancel := context.WithTimeout(context.Background(), latency/10)
	defer cancel()
	_, err := c.SendMessage(short, &rocketryv1.SendMessageRequest{Messages: []*rocketryv1.Message{msg("t", "a")}})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("SendMessage with a deadline of %v under a latency of %v = %v; want DEADLINE_EXCEEDED", latency/10, latency, err)
	}
	mustSend(t, c, msg("t", "b"))
	if got := b.Stats().Faults["latency"]; got < 2 {
		t.Errorf("faults latency = %d; want every call held (at least the 2 answered)", got)
	}
}

func TestFaultBlackholeUntilDeadline(t *testing.T) {
	b, c := start(t, broker.WithFaults(broker.Faults{BlackholeRate: 1}))
	cx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.SendMessage(cx, &rocketryv1.SendMessageRequest{Messages: []*rocketryv1.Message{msg("t", "a")}})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("blackholed SendMessage = %v; want DeadlineExceeded", err)
	}
	if s := b.Stats(); s.Stored != 0 || s.Faults["blackhole"] != 1 {
		t.Errorf("Stats() stored %d faults %v; want 0, blackhole 1", s.Stored, s.Faults)
	}
}

func TestFaultBlackholeEndsOnStop(t *testing.T) {
	b, err := broker.New(broker.WithFaults(broker.Faults{BlackholeRate: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	c := dial(t, b.Addr())
	done := make(chan error)
	go func() {
		_, err := c.SendMessage(context.Background(), &rocketryv1.SendMessageRequest{Messages: []*rocketryv1.Message{msg("t", "a")}})
		done <- err
	}()
	waitFor(t, func() bool { return b.Stats().Faults["blackhole"] == 1 })
	b.Stop()
	b.Stop() // idempotent
	if err := <-done; status.Code(err) != codes.Unavailable {
		t.Errorf("blackholed SendMessage after Stop = %v; want Unavailable", err)
	}
	if err := b.Start("127.0.0.1:0"); err != broker.ErrStopped {
		t.Errorf("Start after Stop = %v; want ErrStopped", err)
	}
}

func TestFaultDrop(t *testing.T) {
	b, c := start(t, broker.WithFaults(broker.Faults{DropRate: 1}))
	_, err := send(t, c, msg("t", "a"))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("dropped SendMessage = %v; want Unavailable", err)
	}
	b.SetFaults(broker.Faults{})
	sendAfterReconnect(t, c, msg("t", "a"))
	if s := b.Stats(); s.Stored != 1 || s.Faults["drop"] != 1 {
		t.Errorf("Stats() stored %d faults %v; want 1, drop 1", s.Stored, s.Faults)
	}
}

func TestFaultUnavailable(t *testing.T) {
	b, c := start(t, broker.WithFaults(broker.Faults{Unavailable: true}))
	_, err := send(t, c, msg("t", "a"))
	wantRefusal(t, err, codes.Unavailable, rocketryv1.Code_CODE_UNAVAILABLE, 0)
	if s := b.Stats(); s.Stored != 0 || s.Faults["unavailable"] != 1 {
		t.Errorf("Stats() stored %d faults %v; want 0, unavailable 1", s.Stored, s.Faults)
	}
}

func TestFaultsDeterministicUnderSeed(t *testing.T) {
	pattern := func() []codes.Code {
		_, c := start(t, broker.WithSeed(42), broker.WithFaults(broker.Faults{InternalRate: 0.5}))
		var out []codes.Code
		for i := range 30 {
			_, err := send(t, c, msg("t", string(rune('a'+i))))
			out = append(out, status.Code(err))
		}
		return out
	}
	a, b := pattern(), pattern()
	failures := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("call %d: %v then %v under the same seed; want the same", i, a[i], b[i])
		}
		if a[i] == codes.Internal {
			failures++
		}
	}
	if failures == 0 || failures == len(a) {
		t.Errorf("%d of %d calls failed at rate 0.5; want some, not all", failures, len(a))
	}
}

func TestRestartKeepsMessagesAndAddress(t *testing.T) {
	b, c := start(t, broker.WithQueues(2))
	fill(t, c, "t", "before", 30)
	receive(t, c, "t", "g", 10)
	addr := b.Addr()

	// A call in flight during the restart fails with UNAVAILABLE.
	b.SetFaults(broker.Faults{BlackholeRate: 1})
	done := make(chan error)
	go func() {
		_, err := c.SendMessage(context.Background(), &rocketryv1.SendMessageRequest{Messages: []*rocketryv1.Message{msg("t", "inflight")}})
		done <- err
	}()
	waitFor(t, func() bool { return b.Stats().Faults["blackhole"] == 1 })
	if err := b.Restart(); err != nil {
		t.Fatalf("Restart() = %v", err)
	}
	if err := <-done; status.Code(err) != codes.Unavailable {
		t.Errorf("SendMessage in flight during Restart = %v; want Unavailable", err)
	}
	b.SetFaults(broker.Faults{})
	if b.Addr() != addr {
		t.Errorf("Addr() after Restart = %q; want %q", b.Addr(), addr)
	}
	sendAfterReconnect(t, c, msgs("t", "after", 5)...)
	if got := len(b.Messages("t")); got != 35 {
		t.Errorf("Messages after Restart = %d; want 35", got)
	}
	if got := len(receive(t, c, "t", "g", 100)); got != 25 {
		t.Errorf("group receive after Restart = %d; want the 25 it had not read", got)
	}
	if err := b.Restart(); err != nil {
		t.Fatalf("second Restart() = %v", err)
	}
	// The client notices the closed connection on its own time; a call
	// sent on it before that fails UNAVAILABLE, the next ones reconnect.
	waitFor(t, func() bool {
		_, err := c.GetStats(ctx(t), &rocketryv1.GetStatsRequest{}, grpc.WaitForReady(true))
		return err == nil
	})
}

func TestDropConnections(t *testing.T) {
	b, c := start(t, broker.WithFaults(broker.Faults{BlackholeRate: 1}))
	done := make(chan error)
	go func() {
		_, err := c.SendMessage(context.Background(), &rocketryv1.SendMessageRequest{Messages: []*rocketryv1.Message{msg("t", "a")}})
		done <- err
	}()
	waitFor(t, func() bool { return b.Stats().Faults["blackhole"] == 1 })
	b.DropConnections()
	if err := <-done; status.Code(err) != codes.Unavailable {
		t.Errorf("SendMessage during DropConnections = %v; want Unavailable", err)
	}
	b.SetFaults(broker.Faults{})
	sendAfterReconnect(t, c, msg("t", "a"))
}

// waitFor waits up to 5 s for cond, checked every millisecond.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 5*time.Second, time.Millisecond, "condition not met in 5 s")
}

// sendAfterReconnect sends ms after the broker closed c's connection: a
// call can still go out on the closing connection and fail UNAVAILABLE
// (outcome unknown, so the ids make the retry safe); the next reconnects.
func sendAfterReconnect(t testing.TB, c *client, ms ...*rocketryv1.Message) {
	t.Helper()
	var err error
	for range 50 {
		_, err = c.SendMessage(ctx(t), &rocketryv1.SendMessageRequest{Messages: ms}, grpc.WaitForReady(true))
		if status.Code(err) != codes.Unavailable {
			break
		}
		// The call went out on the closing connection: wait for the
		// channel to move on (up to a second; the next call waits for
		// it to be ready).
		wctx, cancel := context.WithTimeout(ctx(t), time.Second)
		c.conn.WaitForStateChange(wctx, c.conn.GetState())
		cancel()
	}
	if err != nil {
		t.Fatalf("SendMessage after reconnecting = %v; want success", err)
	}
}

// TestSetFaultsAndSetThrottleRejectInvalid pins that SetFaults no longer
// clamps invalid faults: both setters return an error naming the field and
// keep what was in force.
func TestSetFaultsAndSetThrottleRejectInvalid(t *testing.T) {
	b, c := start(t, broker.WithFaults(broker.Faults{InternalRate: 1}), broker.WithThrottle(broker.Throttle{MaxSendRate: 1000}))
	for _, tc := range []struct {
		name string
		err  error
		kind error
		want string
	}{
		{"SetFaults rate", b.SetFaults(broker.Faults{DropRate: 2}), broker.ErrInvalidFaults, "DropRate"},
		{"SetFaults sum", b.SetFaults(broker.Faults{DropRate: 0.6, InternalRate: 0.6}), broker.ErrInvalidFaults, "above 1"},
		{"SetFaults stored-internal rate", b.SetFaults(broker.Faults{StoredInternalRate: -0.1}), broker.ErrInvalidFaults, "StoredInternalRate"},
		{"SetFaults sum with stored-internal", b.SetFaults(broker.Faults{InternalRate: 0.5, StoredInternalRate: 0.6}), broker.ErrInvalidFaults, "StoredInternalRate = 1.1"},
		{"SetThrottle", b.SetThrottle(broker.Throttle{MaxBacklog: 5, BacklogLowWater: 6}), broker.ErrInvalidThrottle, "BacklogLowWater"},
	} {
		if !errors.Is(tc.err, tc.kind) || !strings.Contains(tc.err.Error(), tc.want) || !strings.HasPrefix(tc.err.Error(), "broker: ") {
			t.Errorf("%s = %v; want an error wrapping %v naming %s", tc.name, tc.err, tc.kind, tc.want)
		}
	}
	_, err := send(t, c, msg("t", "a"))
	wantRefusal(t, err, codes.Internal, rocketryv1.Code_CODE_INTERNAL_ERROR, 0) // the faults in force are kept
	if err := b.SetFaults(broker.Faults{}); err != nil {
		t.Fatalf("SetFaults(Faults{}) = %v; want nil", err)
	}
	mustSend(t, c, msg("t", "a"))
}
