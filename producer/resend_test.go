package producer

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	"google.golang.org/grpc/resolver/manual"
)

// sends counts the SendMessage calls each broker received.
func sends(bs []*broker.Broker) []int64 {
	out := make([]int64, len(bs))
	for i, b := range bs {
		out[i] = b.Stats().GetSendRequests()
	}
	return out
}

// TestResendStaysOnThePin: a dead letter that may be stored on one broker
// is resent there, over both protocols, even to a broker that fails it:
// its retries stay, and a failure keeps the pin for the next replay.
func TestResendStaysOnThePin(t *testing.T) {
	t.Parallel()
	bs := brokertest.StartCluster(t, 3)
	addrs := []string{bs[0].Addr(), bs[1].Addr(), bs[2].Addr()}
	for _, tt := range []struct {
		proto Protocol
		pin   string // broker 1's name on the protocol
	}{
		{RocketryV1, bs[1].Addr()},
		{RocketMQ5, "broker-1"},
	} {
		t.Run(tt.proto.String(), func(t *testing.T) {
			sink := newMemSink()
			p := newTestProducer(t, strings.Join(addrs, ","), WithProtocol(tt.proto), WithMaxAttempts(3), WithDeadLetterSink(sink))
			for i := range 6 {
				before := sends(bs)
				m := &Message{ID: "r-" + tt.proto.String() + "-" + string(rune('a'+i)), Topic: "orders", Body: []byte("x")}
				_, err := p.Resend(context.Background(), &DeadLetter{Message: m, MaybeStoredAt: tt.pin})
				require.NoError(t, err)
				after := sends(bs)
				assert.Equal(t, []int64{0, 1, 0}, []int64{after[0] - before[0], after[1] - before[1], after[2] - before[2]}, "resend %d", i)
			}

			require.NoError(t, bs[1].SetFaults(broker.Faults{Unavailable: true}))
			defer bs[1].SetFaults(broker.Faults{})
			before := sends(bs)
			m := &Message{ID: "r-" + tt.proto.String() + "-fail", Topic: "orders", Body: []byte("x")}
			_, err := p.Resend(context.Background(), &DeadLetter{Message: m, MaybeStoredAt: tt.pin})
			var se *SendError
			require.ErrorAs(t, err, &se)
			after := sends(bs)
			assert.Equal(t, []int64{0, 3, 0}, []int64{after[0] - before[0], after[1] - before[1], after[2] - before[2]}, "every attempt on the pin")
			assert.Equal(t, tt.pin, se.MaybeStoredAt, "the pin is kept for the next replay")
			require.NotNil(t, sink.get(m.ID))
			assert.Equal(t, tt.pin, sink.get(m.ID).MaybeStoredAt)
		})
	}
}

func TestResendRefuses(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t)
	p := newTestProducer(t, b.Addr())
	_, err := p.Resend(context.Background(), &DeadLetter{Message: &Message{Topic: "t"}})
	assert.ErrorIs(t, err, ErrInvalidMessage)
	_, err = p.Resend(context.Background(), nil)
	assert.ErrorIs(t, err, ErrInvalidMessage)
	_, err = p.Resend(context.Background(), &DeadLetter{Message: &Message{ID: "x", Topic: "t"}, MaybeStoredAt: "10.0.0.1:1"})
	assert.ErrorIs(t, err, ErrEndpointUnknown)
	assert.ErrorContains(t, err, `endpoint "10.0.0.1:1"`)
	assert.Zero(t, b.Stats().GetSendRequests())

	// With WithFailoverOnUnknownOutcome, the caller accepts another broker.
	fp := newTestProducer(t, b.Addr(), WithFailoverOnUnknownOutcome())
	_, err = fp.Resend(context.Background(), &DeadLetter{Message: &Message{ID: "x", Topic: "t"}, MaybeStoredAt: "10.0.0.1:1"})
	assert.NoError(t, err)
}

// TestResendStaysOnThePinOfASchemeTarget: behind a target with a scheme, a
// resend goes to the resolved address it is pinned to, every attempt, and
// fails with ErrEndpointUnknown when the resolver no longer gives it.
func TestResendStaysOnThePinOfASchemeTarget(t *testing.T) {
	t.Parallel()
	bs := brokertest.StartCluster(t, 3)
	addrs := []string{bs[0].Addr(), bs[1].Addr(), bs[2].Addr()}
	target, r, opt := schemeTarget(addrs...)
	p := newTestProducer(t, target, opt, WithMaxAttempts(3))
	for i := range 6 {
		before := sends(bs)
		m := &Message{ID: "s-" + string(rune('a'+i)), Topic: "orders", Body: []byte("x")}
		_, err := p.Resend(context.Background(), &DeadLetter{Message: m, MaybeStoredAt: addrs[2]})
		require.NoError(t, err)
		after := sends(bs)
		assert.Equal(t, []int64{0, 0, 1}, []int64{after[0] - before[0], after[1] - before[1], after[2] - before[2]}, "resend %d", i)
	}

	r.UpdateState(stateOf(addrs[0], addrs[1])) // applied before it returns
	_, err := p.Resend(context.Background(), &DeadLetter{Message: &Message{ID: "s-gone", Topic: "orders"}, MaybeStoredAt: addrs[2]})
	assert.ErrorIs(t, err, ErrEndpointUnknown, "an address the resolver dropped is unknown")
	assert.EqualValues(t, 6, bs[2].Stats().GetStored(), "nothing more went to the dropped address")
}

// TestResendWaitsForTheResolverAsAnAttempt: behind a target whose resolver
// has not answered, a Resend waits for it no longer than an attempt would
// (it waited forever, and Close with it).
func TestResendWaitsForTheResolverAsAnAttempt(t *testing.T) {
	r := manual.NewBuilderWithScheme("rocketrytest")
	p, err := New("rocketrytest:///never", WithProtocol(RocketryV1), WithResolvers(r), WithAttemptTimeout(50*time.Millisecond))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := p.Resend(context.Background(), &DeadLetter{Message: &Message{ID: "x", Topic: "t"}, MaybeStoredAt: "127.0.0.1:1"})
		done <- err
	}()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, ErrNoEndpoints)
	case <-time.After(10 * time.Second): // a guard, far above the 50 ms attempt timeout
		t.Fatal("Resend still waits for a resolver that never answers")
	}
	require.NoError(t, p.Close(context.Background()))
}

// TestEveryAccessPointNoCopyOnTwoBrokers: a RocketMQ 5 producer given the
// access points of every broker of a cluster reads three brokers, each at
// its own address, so that a retry after an unknown outcome (stored, then
// answered INTERNAL; a connection dropped) stays on the broker that may
// hold the message: no message is stored on two brokers, and none is lost,
// while one of the brokers crashes and comes back.
func TestEveryAccessPointNoCopyOnTwoBrokers(t *testing.T) {
	// Not parallel: a broker crashes and comes back while 10 attempts a
	// millisecond apart run; a loaded machine stretches the one, not the other.
	bs := brokertest.StartCluster(t, 3, broker.WithQueues(2), broker.WithSeed(7))
	addrs := make([]string, len(bs))
	for i, b := range bs {
		addrs[i] = b.Addr()
		require.NoError(t, b.SetFaults(broker.Faults{StoredInternalRate: 0.2, InternalRate: 0.1, DropRate: 0.05}))
	}
	// 30 attempts 5 ms apart: a send outlives a restart of its broker (its
	// retries after an unknown outcome stay there) and a run of injected
	// faults (a third of the attempts each) on a loaded machine.
	p := newTestProducer(t, strings.Join(addrs, ";"), WithProtocol(RocketMQ5), WithMaxAttempts(30),
		WithFailureSchedule(backoff.Constant(5*time.Millisecond)), WithBatching(0, 0, 0))
	const n, senders = 400, 8
	var wg sync.WaitGroup
	var finished atomic.Int64
	errs := make(chan error, n)
	for g := range senders {
		wg.Go(func() {
			for i := g; i < n; i += senders {
				if _, err := p.Send(context.Background(), &Message{ID: fmt.Sprintf("m-%03d", i), Topic: "orders", Body: []byte("x")}); err != nil {
					errs <- fmt.Errorf("message %d: %w", i, err)
				}
				finished.Add(1)
			}
		})
	}
	// Broker 0 crashes and comes back while they send, after each quarter
	// of the sends: its connections move, and a client that took it for
	// one broker behind three addresses would send its retries to another.
	for k := range int64(3) {
		require.Eventually(t, func() bool { return finished.Load() >= (k+1)*n/4 }, 30*time.Second, time.Millisecond)
		require.NoError(t, bs[0].Restart())
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	on := map[string]map[int]bool{} // message ID: the brokers that store it
	for j, b := range bs {
		for _, id := range visibleIDs(b, "orders") {
			if on[id] == nil {
				on[id] = map[int]bool{}
			}
			on[id][j] = true
		}
	}
	assert.Len(t, on, n, "messages stored")
	for id, brokers := range on {
		assert.Len(t, brokers, 1, "message %s is stored on brokers %v", id, brokers)
	}
}
