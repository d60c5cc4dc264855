package producer

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
)

// fakeWaits is a clock for one producer (withClock), the time of its
// executor's and its pacer's waits: every wait is recorded and ends at once
// (the time does not move on). It returns the option and the waits so far.
func fakeWaits() (Option, func() []time.Duration) {
	f := &fakeClock{}
	return withClock(f), f.recorded
}

// fakeClock is the wall clock, moved on by the waits it was asked for when
// moves is set; its waits end at once.
type fakeClock struct {
	moves bool
	mu    sync.Mutex
	ahead time.Duration
	waits []time.Duration
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return time.Now().Add(f.ahead)
}

func (f *fakeClock) Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	f.mu.Lock()
	f.waits = append(f.waits, d)
	if f.moves {
		f.ahead += d
	}
	f.mu.Unlock()
	return ctx.Err() == nil
}

func (f *fakeClock) recorded() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.waits...)
}

// TestDefaultThrottleSchedule: with the defaults, throttled sends wait 1 s,
// 1.6 s, 2.56 s (no jitter) counted from each attempt's start, and every
// attempt after a wait is given at least MinConnectTimeout (20 s) instead of
// the 3 s attempt timeout. The waits are faked, so the test takes no time.
func TestDefaultThrottleSchedule(t *testing.T) {
	t.Parallel()
	clk, waits := fakeWaits()
	s := &stub{script: []error{err530, err530, err530}}
	addr := startStub(t, s)
	rec := &recorder{}
	var givenMu sync.Mutex
	var given []time.Duration
	p := newTestProducer(t, addr, clk, WithRand(nil), WithMaxAttempts(4), WithObserver(rec.observe), WithPacing(false),
		WithDialOptions(withAttemptProbe(func(d time.Duration) {
			givenMu.Lock()
			given = append(given, d)
			givenMu.Unlock()
		})))
	if _, err := p.Send(context.Background(), msg("t")); err != nil {
		t.Fatalf("Send() = %v", err)
	}
	want := []time.Duration{time.Second, 1600 * time.Millisecond, 2560 * time.Millisecond}
	retries := rec.retries()
	got := waits()
	if len(retries) != 3 || len(got) != 3 {
		t.Fatalf("retries %d, waits %d; want 3 and 3", len(retries), len(got))
	}
	for i := range want {
		if retries[i].Delay != want[i] {
			t.Errorf("retry %d Delay = %v; want %v", i+1, retries[i].Delay, want[i])
		}
		// The wait is what is left of the delay after the attempt.
		if got[i] > want[i] || got[i] <= 0 {
			t.Errorf("wait %d = %v; want in (0, %v]", i+1, got[i], want[i])
		}
	}
	givenMu.Lock()
	defer givenMu.Unlock()
	if len(given) != 4 {
		t.Fatalf("attempts seen = %d; want 4", len(given))
	}
	if given[0] > DefaultAttemptTimeout {
		t.Errorf("first attempt given %v; want at most the attempt timeout %v", given[0], DefaultAttemptTimeout)
	}
	for i, g := range given[1:] {
		if g <= DefaultAttemptTimeout {
			t.Errorf("attempt %d after a throttle given %v; want more than %v (MinConnectTimeout 20 s)", i+2, g, DefaultAttemptTimeout)
		}
	}
}

// TestRateLimitDeadline: a wait for the rate limiter that would end after
// the caller's deadline fails the send at once.
func TestRateLimitDeadline(t *testing.T) {
	t.Parallel()
	clk, waits := fakeWaits()
	s := &stub{}
	addr := startStub(t, s)
	p := newTestProducer(t, addr, clk, WithRateLimit(0.001, 1), WithFallback(func(*Message, error) {}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := p.Send(ctx, msg("t")); err != nil { // the burst
		t.Fatalf("first Send() = %v", err)
	}
	_, err := p.Send(ctx, msg("t"))
	var se *SendError
	if !errors.As(err, &se) || !errors.Is(err, ErrDeadlineTooShort) || se.Attempts != 0 || !se.DeadLettered {
		t.Errorf("second Send() = %v; want ErrDeadlineTooShort after 0 attempts, handed to the fallback", err)
	}
	if s.count() != 1 || len(waits()) != 0 {
		t.Errorf("calls %d, waits %v; want 1 call and no wait", s.count(), waits())
	}
}

// withAttemptProbe is a dial option whose interceptor reports the time
// each attempt is given: until its context's deadline, else 0.
func withAttemptProbe(report func(time.Duration)) grpc.DialOption {
	return grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if dl, ok := ctx.Deadline(); ok {
			report(time.Until(dl))
		} else {
			report(0)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
}

// TestConnectionBackoffAttemptTime: after a throttle on the default
// connection backoff, the next attempt is given what the algorithm gives a
// try, max(next backoff, MIN_CONNECT_TIMEOUT): 20 s while the backoff is
// shorter, then the backoff itself (1.6^7 s = 26.8 s after the 7th
// throttle). Regression: attempts were cut at 20 s.
func TestConnectionBackoffAttemptTime(t *testing.T) {
	t.Parallel()
	clk, _ := fakeWaits()
	s := &stub{script: []error{err530, err530, err530, err530, err530, err530, err530, err530}}
	addr := startStub(t, s)
	var mu sync.Mutex
	var given []time.Duration
	p := newTestProducer(t, addr, clk, WithRand(nil), WithMaxAttempts(9),
		WithDialOptions(withAttemptProbe(func(d time.Duration) {
			mu.Lock()
			given = append(given, d)
			mu.Unlock()
		})))
	_, err := p.Send(context.Background(), msg("t"))
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, given, 9)
	for i, g := range given[1:] {
		next := time.Duration(math.Pow(1.6, float64(i+1)) * float64(time.Second)) // retry i+2's backoff
		want := max(20*time.Second, next)
		assert.InDelta(t, want.Seconds(), g.Seconds(), 0.5, "attempt %d after %d throttles given %v; want %v", i+2, i+1, g, want)
	}
	assert.Greater(t, given[8], 26*time.Second, "the attempt after the 7th throttle (1.6^7 s = 26.8 s backoff) must not be cut at 20 s")
}
