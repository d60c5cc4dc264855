package producer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// earliest is the earliest deadline the watchdog keeps, if any.
func (w *watchdog) earliest() (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.heap) == 0 {
		return time.Time{}, false
	}
	return w.heap[0].deadline, true
}

// inFlight is the number of attempts the watchdog keeps.
func (w *watchdog) inFlight() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.heap)
}

// TestWatchdogFiresAtDeadlines: on synctest's clock, each attempt is
// cancelled exactly at its deadline, in deadline order whatever the order
// of arming, with errAttemptTimeout as the cause; an attempt disarmed
// before its deadline is never cancelled, and its node's reuse is not
// cancelled in its place.
func TestWatchdogFiresAtDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var w watchdog
		t0 := time.Now()
		timeouts := []time.Duration{30 * time.Millisecond, 10 * time.Millisecond, time.Hour, 20 * time.Millisecond, 10 * time.Millisecond}
		type armed struct {
			ctx   context.Context
			node  *wdNode
			ended time.Time
		}
		at := make([]*armed, len(timeouts))
		var mu sync.Mutex
		for i, d := range timeouts {
			ctx, cancel := context.WithCancelCause(context.Background())
			a := &armed{ctx: ctx}
			a.node = w.arm(t0.Add(d), cancel)
			at[i] = a
			context.AfterFunc(ctx, func() {
				mu.Lock()
				a.ended = time.Now()
				mu.Unlock()
			})
		}
		// The hour-long attempt ends at 15 ms, before its deadline.
		time.Sleep(15 * time.Millisecond)
		synctest.Wait()
		if fired := w.disarm(at[2].node); fired {
			t.Errorf("disarm(1 h attempt at 15 ms) = fired; want not fired")
		}
		// Its node is taken by a new attempt, due in 1 h as well.
		ctx2, cancel2 := context.WithCancelCause(context.Background())
		defer cancel2(nil)
		n2 := w.arm(time.Now().Add(time.Hour), cancel2)
		time.Sleep(time.Second)
		synctest.Wait()

		mu.Lock()
		defer mu.Unlock()
		for i, d := range timeouts {
			a := at[i]
			if i == 2 {
				if a.ctx.Err() != nil || !a.ended.IsZero() {
					t.Errorf("attempt %d (%v, disarmed at 15 ms) cancelled (%v); want never", i, d, context.Cause(a.ctx))
				}
				continue
			}
			if got := context.Cause(a.ctx); got != errAttemptTimeout {
				t.Errorf("attempt %d (%v): cause = %v; want errAttemptTimeout", i, d, got)
			}
			if got := a.ended.Sub(t0); got != d {
				t.Errorf("attempt %d cancelled at %v; want at its deadline %v", i, got, d)
			}
			if !w.disarm(a.node) {
				t.Errorf("disarm(attempt %d) = not fired; want fired", i)
			}
		}
		if ctx2.Err() != nil {
			t.Errorf("the attempt that reused a disarmed node was cancelled: %v", context.Cause(ctx2))
		}
		if got := w.inFlight(); got != 1 {
			t.Errorf("attempts kept = %d; want 1", got)
		}
		if w.disarm(n2) {
			t.Errorf("disarm(reused node) = fired; want not fired")
		}
		if got := w.inFlight(); got != 0 {
			t.Errorf("attempts kept after every disarm = %d; want 0", got)
		}
	})
}

// TestWatchdogEarlierDeadlineResetsTimer: an attempt armed with a deadline
// sooner than those already kept is cancelled at its own deadline, not at
// the earlier-set wake-up.
func TestWatchdogEarlierDeadlineResetsTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var w watchdog
		t0 := time.Now()
		_, cancelLong := context.WithCancelCause(context.Background())
		long := w.arm(t0.Add(time.Minute), cancelLong)
		ctx, cancel := context.WithCancelCause(context.Background())
		short := w.arm(t0.Add(5*time.Millisecond), cancel)
		<-ctx.Done()
		if got := time.Since(t0); got != 5*time.Millisecond {
			t.Errorf("short attempt cancelled at %v; want 5ms", got)
		}
		if !w.disarm(short) || w.disarm(long) {
			t.Errorf("disarm: want the short attempt fired, the long one not")
		}
		cancelLong(nil)
	})
}

// TestWatchdogRace: attempts armed and disarmed from many goroutines with
// deadlines around now, so that the timer fires while nodes are disarmed
// and reused. Invariants: disarm says fired exactly when the attempt was
// cancelled with errAttemptTimeout, never before its deadline, and an
// attempt disarmed unfired is never cancelled afterwards. Run with -race.
func TestWatchdogRace(t *testing.T) {
	var w watchdog
	const goroutines, rounds = 16, 200
	type kept struct {
		ctx      context.Context
		deadline time.Time
	}
	var mu sync.Mutex
	var unfired []kept
	var nfired int
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range rounds {
				ctx, cancel := context.WithCancelCause(context.Background())
				dl := time.Now().Add(time.Duration(r.IntN(2000)) * time.Microsecond)
				n := w.arm(dl, cancel)
				time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
				fired := w.disarm(n)
				cause := context.Cause(ctx)
				switch {
				case fired && cause != errAttemptTimeout:
					t.Errorf("disarm = fired, cause %v; want errAttemptTimeout", cause)
				case fired && time.Now().Before(dl):
					t.Errorf("attempt cancelled before its deadline")
				case !fired && cause != nil:
					t.Errorf("disarm = not fired, cause %v; want not cancelled", cause)
				}
				mu.Lock()
				if fired {
					nfired++
				} else {
					unfired = append(unfired, kept{ctx, dl})
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// Past every deadline, with the timer's last wake-up done.
	time.Sleep(10 * time.Millisecond)
	for _, k := range unfired {
		if k.ctx.Err() != nil {
			t.Fatalf("an attempt disarmed unfired was cancelled later: %v", context.Cause(k.ctx))
		}
	}
	if got := w.inFlight(); got != 0 {
		t.Errorf("attempts kept = %d; want 0", got)
	}
	if nfired == 0 || len(unfired) == 0 {
		t.Logf("fired %d, unfired %d: the race was not exercised both ways", nfired, len(unfired))
	}
}

// TestTimedOut: a cancellation by the watchdog reads as a timeout; an
// answer that came as the timeout passed is kept.
func TestTimedOut(t *testing.T) {
	tests := []struct {
		err, want error
	}{
		{nil, nil},
		{status.Error(codes.Canceled, "context canceled"), errAttemptTimeout},
		{context.Canceled, errAttemptTimeout},
		{fmt.Errorf("wrapped: %w", context.Canceled), errAttemptTimeout},
		{errAttemptTimeout, errAttemptTimeout},
		{err530, err530},
		{err503, err503},
	}
	for _, tt := range tests {
		if got := timedOut(tt.err); got != tt.want {
			t.Errorf("timedOut(%v) = %v; want %v", tt.err, got, tt.want)
		}
	}
	if a := readAnswer(errAttemptTimeout); a.grpcCode != codes.DeadlineExceeded {
		t.Errorf("readAnswer(errAttemptTimeout).grpcCode = %v; want DeadlineExceeded", a.grpcCode)
	}
}

// TestAttemptTimeoutOnBlackhole: against a broker that never answers, each
// attempt is ended by the watchdog at its timeout and retried; it fails as
// a timeout (DeadlineExceeded), and a transactional message is not retried
// after it. The same through the interceptor.
func TestAttemptTimeoutOnBlackhole(t *testing.T) {
	b := brokertest.Start(t, broker.WithFaults(broker.Faults{BlackholeRate: 1}))
	const timeout = 40 * time.Millisecond
	tests := []struct {
		name          string
		transactional bool
		wantKind      error
		wantAttempts  int
	}{
		{"retried", false, ErrAttemptsExhausted, 3},
		{"transactional not retried", true, ErrNotRetryable, 1},
	}
	for _, tt := range tests {
		t.Run("Send/"+tt.name, func(t *testing.T) {
			rec := &recorder{}
			p := newTestProducer(t, b.Addr(), WithAttemptTimeout(timeout), WithObserver(rec.observe))
			before := b.Stats().GetSendRequests()
			m := msg("t")
			m.Transactional = tt.transactional
			start := time.Now()
			_, err := p.Send(context.Background(), m)
			elapsed := time.Since(start)
			var se *SendError
			if !errors.As(err, &se) || !errors.Is(err, tt.wantKind) || se.Attempts != tt.wantAttempts {
				t.Fatalf("Send() = %v; want a *SendError wrapping %v after %d attempts", err, tt.wantKind, tt.wantAttempts)
			}
			if got := status.Code(err); got != codes.DeadlineExceeded {
				t.Errorf("status.Code(Send()) = %v; want DeadlineExceeded (the attempt's timeout)", got)
			}
			for _, e := range rec.retries() {
				if got := status.Code(e.Err); got != codes.DeadlineExceeded || e.Why != "failure" {
					t.Errorf("retry event: %s, %v; want a failure, DeadlineExceeded", e.Why, e.Err)
				}
			}
			if got := len(rec.retries()); got != tt.wantAttempts-1 {
				t.Errorf("retries = %d; want %d", got, tt.wantAttempts-1)
			}
			// No attempt ends before its timeout (a lower bound only).
			if min := time.Duration(tt.wantAttempts) * timeout; elapsed < min {
				t.Errorf("Send() took %v; want at least %d attempt timeouts (%v)", elapsed, tt.wantAttempts, min)
			}
			if got := b.Stats().GetSendRequests() - before; got != int64(tt.wantAttempts) {
				t.Errorf("broker saw %d requests; want %d", got, tt.wantAttempts)
			}
			if got := p.wd.inFlight(); got != 0 {
				t.Errorf("watchdog keeps %d attempts after Send; want 0", got)
			}
		})
		t.Run("interceptor/"+tt.name, func(t *testing.T) {
			cc := dialWith(t, b.Addr(), UnaryClientInterceptor(WithAttemptTimeout(timeout)))
			before := b.Stats().GetSendRequests()
			_, err := rocketryv1.NewMessagingServiceClient(cc).SendMessage(context.Background(), sendReq("x-"+tt.name, tt.transactional))
			var se *SendError
			if !errors.As(err, &se) || !errors.Is(err, tt.wantKind) || se.Attempts != tt.wantAttempts {
				t.Fatalf("SendMessage() = %v; want a *SendError wrapping %v after %d attempts", err, tt.wantKind, tt.wantAttempts)
			}
			if got := status.Code(err); got != codes.DeadlineExceeded {
				t.Errorf("status.Code(SendMessage()) = %v; want DeadlineExceeded", got)
			}
			if got := b.Stats().GetSendRequests() - before; got != int64(tt.wantAttempts) {
				t.Errorf("broker saw %d requests; want %d", got, tt.wantAttempts)
			}
		})
	}
}

// TestCallerDeadlineStillStops: the caller's deadline, sooner than the
// attempt timeout, ends the send with the context's error, not a timeout of
// the attempt; and the watchdog keeps nothing for such an attempt.
func TestCallerDeadlineStillStops(t *testing.T) {
	b := brokertest.Start(t, broker.WithFaults(broker.Faults{BlackholeRate: 1}))
	var p *Producer
	kept := -1
	p = newTestProducer(t, b.Addr(), WithDialOptions(grpc.WithUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			kept = p.wd.inFlight()
			return invoker(ctx, method, req, reply, cc, opts...)
		})))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := p.Send(ctx, msg("t"))
	var se *SendError
	if !errors.As(err, &se) || !errors.Is(err, context.DeadlineExceeded) || se.Attempts != 1 {
		t.Fatalf("Send() = %v; want a *SendError wrapping context.DeadlineExceeded after 1 attempt", err)
	}
	if kept != 0 {
		t.Errorf("watchdog kept %d attempts under a sooner caller deadline; want 0", kept)
	}

	// A caller deadline later than the attempt timeout: the watchdog ends
	// the attempt, and the caller's cancellation still stops the send.
	p2 := newTestProducer(t, b.Addr(), WithAttemptTimeout(time.Hour))
	ctx2, cancel2 := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel2)
	_, err = p2.Send(ctx2, msg("t"))
	if !errors.As(err, &se) || !errors.Is(err, context.Canceled) || se.Attempts != 1 {
		t.Fatalf("Send(cancelled ctx) = %v; want a *SendError wrapping context.Canceled after 1 attempt", err)
	}
}

// TestWatchdogConcurrentTimeouts: many calls in flight at once through one
// interceptor, with per-call attempt timeouts of 20 to 80 ms, all against
// a broker that never answers: every call makes its two attempts, each
// ended as a timeout, so the watchdog is shared by the per-call copies of
// the options and ends every attempt, whatever its deadline's place.
func TestWatchdogConcurrentTimeouts(t *testing.T) {
	b := brokertest.Start(t, broker.WithFaults(broker.Faults{BlackholeRate: 1}))
	cc := dialWith(t, b.Addr(), UnaryClientInterceptor(WithMaxAttempts(2), WithAttemptTimeout(time.Hour)))
	client := rocketryv1.NewMessagingServiceClient(cc)
	const calls = 48
	var wg sync.WaitGroup
	errs := make([]error, calls)
	for i := range calls {
		wg.Go(func() {
			d := time.Duration(20+(i*37)%61) * time.Millisecond
			_, errs[i] = client.SendMessage(context.Background(), sendReq(fmt.Sprintf("c%d", i), false),
				WithCallOptions(WithAttemptTimeout(d)))
		})
	}
	wg.Wait()
	for i, err := range errs {
		var se *SendError
		if !errors.As(err, &se) || !errors.Is(err, ErrAttemptsExhausted) || se.Attempts != 2 || status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("call %d = %v; want ErrAttemptsExhausted after 2 attempts, DeadlineExceeded", i, err)
		}
	}
	if got := b.Stats().GetSendRequests(); got != 2*calls {
		t.Errorf("broker saw %d requests; want %d", got, 2*calls)
	}
}

// TestWatchdogLeavesNoGoroutine: once the calls through an interceptor
// have ended, nothing of the watchdog runs, though its timer is still set
// for the default 3 s attempt timeout of the last call.
func TestWatchdogLeavesNoGoroutine(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	b, err := broker.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(b.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(UnaryClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	client := rocketryv1.NewMessagingServiceClient(cc)
	for i := range 20 {
		if _, err := client.SendMessage(context.Background(), sendReq(fmt.Sprintf("g%d", i), false)); err != nil {
			t.Fatalf("SendMessage() = %v", err)
		}
	}
	_ = cc.Close()
	b.Stop()
	goleak.VerifyNone(t, ignore)
}
