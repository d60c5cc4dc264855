package producer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/stretchr/testify/require"
)

// TestCloseWaitsForInFlight: Close lets the sends in flight finish.
func TestCloseWaitsForInFlight(t *testing.T) {
	b := brokertest.Start(t, broker.WithFaults(broker.Faults{Latency: 20 * time.Millisecond}))
	p, err := New(b.Addr(), WithProtocol(RocketryV1))
	if err != nil {
		t.Fatal(err)
	}
	var ok atomic.Int32
	for i := range 20 {
		if err := p.SendAsync(context.Background(), msg("t"), func(_ *SendReceipt, err error) {
			if err == nil {
				ok.Add(1)
			}
		}); err != nil {
			t.Fatalf("SendAsync(%d) = %v", i, err)
		}
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if ok.Load() != 20 || len(b.Messages("t")) != 20 {
		t.Errorf("stored %d (broker %d); want 20", ok.Load(), len(b.Messages("t")))
	}
}

// TestCloseCancelsWhatRemains: when Close's context ends, the sends still
// in flight end with ErrClosed through their callback (or Send), go to the
// fallback, and nothing is accepted afterwards.
func TestCloseCancelsWhatRemains(t *testing.T) {
	b := brokertest.Start(t, broker.WithFaults(broker.Faults{BlackholeRate: 1}))
	var fellBack atomic.Int32
	p, err := New(b.Addr(), WithProtocol(RocketryV1), WithFallback(func(*Message, error) { fellBack.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	var calls [n]atomic.Int32
	var closed atomic.Int32
	for i := range n {
		ctx := context.Background()
		if i%2 == 1 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx) // a context that can end: merged with Close's
			defer cancel()
		}
		if err := p.SendAsync(ctx, msg("t"), func(_ *SendReceipt, err error) {
			calls[i].Add(1)
			if errors.Is(err, ErrClosed) {
				closed.Add(1)
			}
		}); err != nil {
			t.Fatalf("SendAsync(%d) = %v", i, err)
		}
	}
	var syncErr error
	var wg sync.WaitGroup
	wg.Go(func() { _, syncErr = p.Send(context.Background(), msg("t")) })
	require.Eventually(t, func() bool { return b.Stats().GetSendRequests() >= n+1 },
		10*time.Second, time.Millisecond, "every send reaches the broker")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := p.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close() = %v; want context.DeadlineExceeded", err)
	}
	wg.Wait()
	// Close waits for the sends up to their hand-off, not for the caller's
	// code after it (so that a Close called from a callback returns when
	// its context ends): the last callbacks and fallbacks may still be
	// running.
	require.Eventually(t, func() bool {
		ran := 0
		for i := range calls {
			ran += int(calls[i].Load())
		}
		return ran >= n && fellBack.Load() >= n+1
	}, 5*time.Second, time.Millisecond, "every callback and fallback runs")
	for i := range calls {
		if c := calls[i].Load(); c != 1 {
			t.Errorf("callback %d ran %d times; want 1", i, c)
		}
	}
	if closed.Load() != n || !errors.Is(syncErr, ErrClosed) {
		t.Errorf("%d callbacks with ErrClosed, Send = %v; want %d and ErrClosed", closed.Load(), syncErr, n)
	}
	if fellBack.Load() != n+1 {
		t.Errorf("fallback calls = %d; want %d", fellBack.Load(), n+1)
	}
	never := func(*SendReceipt, error) { t.Error("callback of a refused send ran") }
	if err := p.SendAsync(context.Background(), msg("t"), never); !errors.Is(err, ErrClosed) {
		t.Errorf("SendAsync after Close = %v; want ErrClosed", err)
	}
	if err := p.TrySendAsync(context.Background(), msg("t"), never); !errors.Is(err, ErrClosed) {
		t.Errorf("TrySendAsync after Close = %v; want ErrClosed", err)
	}
	if _, err := p.Send(context.Background(), msg("t")); !errors.Is(err, ErrClosed) {
		t.Errorf("Send after Close = %v; want ErrClosed", err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Errorf("second Close() = %v; want nil", err)
	}
}

// TestInFlightBound: TrySendAsync fails at once and SendAsync waits within
// its context when MaxInFlight sends are in flight.
func TestInFlightBound(t *testing.T) {
	s := &stub{script: []error{errBlackhole}}
	addr := startStub(t, s)
	p := newTestProducer(t, addr, WithMaxInFlight(1), WithAttemptTimeout(500*time.Millisecond), WithMaxAttempts(1))
	done := make(chan error, 1)
	if err := p.TrySendAsync(context.Background(), msg("t"), func(_ *SendReceipt, err error) { done <- err }); err != nil {
		t.Fatalf("TrySendAsync() = %v", err)
	}
	never := func(*SendReceipt, error) { t.Error("callback of a refused send ran") }
	if err := p.TrySendAsync(context.Background(), msg("t"), never); !errors.Is(err, ErrBufferFull) {
		t.Errorf("TrySendAsync when full = %v; want ErrBufferFull", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := p.SendAsync(ctx, msg("t"), never); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("SendAsync when full = %v; want context.DeadlineExceeded", err)
	}
	if err := <-done; !errors.Is(err, ErrAttemptsExhausted) {
		t.Errorf("blackholed send = %v; want ErrAttemptsExhausted", err)
	}
	got := make(chan error, 1)
	if err := p.SendAsync(context.Background(), msg("t"), func(_ *SendReceipt, err error) { got <- err }); err != nil {
		t.Fatalf("SendAsync once there is room = %v", err)
	}
	if err := <-got; err != nil {
		t.Errorf("second send = %v; want stored", err)
	}
}

// TestSendAsyncContextEnds: the SendAsync context bounds the send, and its
// end reaches the callback.
func TestSendAsyncContextEnds(t *testing.T) {
	t.Parallel()
	s := &stub{script: []error{errBlackhole}}
	addr := startStub(t, s)
	p := newTestProducer(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	if err := p.SendAsync(ctx, msg("t"), func(_ *SendReceipt, err error) { got <- err }); err != nil {
		t.Fatal(err)
	}
	require.Eventually(t, func() bool { return s.count() > 0 }, 10*time.Second, time.Millisecond, "the send reaches the stub")
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) || errors.Is(err, ErrClosed) {
		t.Errorf("callback err = %v; want context.Canceled", err)
	}
	if err := p.SendAsync(ctx, msg("t"), nil); !errors.Is(err, context.Canceled) {
		t.Errorf("SendAsync(ended ctx) = %v; want context.Canceled", err)
	}
}

// TestCloseTwice: a second Close waits for the first within its ctx; when
// ctx ends first it says so (the producer is not closed yet), and once the
// first has returned it returns nil.
func TestCloseTwice(t *testing.T) {
	b := brokertest.Start(t, broker.WithFaults(broker.Faults{BlackholeRate: 1}))
	p, err := New(b.Addr(), WithProtocol(RocketryV1))
	require.NoError(t, err)
	done := make(chan error, 1)
	require.NoError(t, p.SendAsync(context.Background(), msg("t"), func(_ *SendReceipt, err error) { done <- err }))
	require.Eventually(t, func() bool { return b.Stats().GetSendRequests() >= 1 }, 10*time.Second, time.Millisecond)

	first, cancelFirst := context.WithCancel(context.Background())
	var firstErr error
	var wg sync.WaitGroup
	wg.Go(func() { firstErr = p.Close(first) })
	<-p.closing // the first Close has begun

	short, cancelShort := context.WithCancel(context.Background())
	cancelShort()
	require.ErrorIs(t, p.Close(short), context.Canceled, "a second Close whose ctx ended before the first returned")

	cancelFirst() // the black-holed send is cancelled
	wg.Wait()
	require.ErrorIs(t, firstErr, context.Canceled)
	require.ErrorIs(t, <-done, ErrClosed)
	require.NoError(t, p.Close(context.Background()), "a Close after the first returned")
}

// TestParkedFIFOSendEndsWithItsContext: an async FIFO send waiting for its
// turn behind a send that hangs ends when its own ctx does: its callback
// runs at once with ctx's error, without an attempt, and the group's sends
// after it are not held by it.
func TestParkedFIFOSendEndsWithItsContext(t *testing.T) {
	b := brokertest.Start(t, broker.WithFaults(broker.Faults{BlackholeRate: 1}))
	p, err := New(b.Addr(), WithProtocol(RocketryV1), WithAttemptTimeout(time.Minute))
	require.NoError(t, err)
	first := make(chan error, 1)
	g := func() *Message { m := msg("t"); m.MessageGroup = "g"; return m }
	require.NoError(t, p.SendAsync(context.Background(), g(), func(_ *SendReceipt, err error) { first <- err }))
	require.Eventually(t, func() bool { return b.Stats().GetSendRequests() >= 1 }, 10*time.Second, time.Millisecond)

	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan error, 1)
	require.NoError(t, p.SendAsync(ctx, g(), func(_ *SendReceipt, err error) { second <- err }))
	cancel()
	select {
	case err = <-second:
	case <-time.After(10 * time.Second): // a bound that fails, not a measure
		t.Fatal("the parked send's callback did not come when its ctx ended")
	}
	require.ErrorIs(t, err, context.Canceled)
	var se *SendError
	require.ErrorAs(t, err, &se)
	require.Zero(t, se.Attempts)
	require.Len(t, first, 0, "the first send is still in flight")
	require.EqualValues(t, 1, b.Stats().GetSendRequests(), "the second send made no attempt")

	cctx, ccancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer ccancel()
	require.ErrorIs(t, p.Close(cctx), context.DeadlineExceeded)
	require.ErrorIs(t, <-first, ErrClosed)
}
