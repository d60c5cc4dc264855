package producer

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// This file holds the retry contract of DESIGN.md: decide, the one function
// that says what follows an attempt, and run, the loop that Producer.Send,
// the async sends and UnaryClientInterceptor all go through.
//
// Counting: MaxAttempts counts attempts, the first included. The schedules
// number retries: retry n of the throttle schedule follows the n-th
// throttled attempt of the send, retry n of the failure schedule the n-th
// failed one, so that repeated throttling walks up the connection backoff
// while an occasional failure in between neither resets it nor advances it.

// newTimer makes the timer of every wait; tests swap it (and restore it with
// t.Cleanup) to observe or shorten waits.
var newTimer = time.NewTimer

// action is what follows an attempt.
type action uint8

const (
	actDone  action = iota // stored
	actRetry               // retry after decision.wait
	actFail                // give up: decision.kind says why
)

// decision is decide's answer.
type decision struct {
	act       action
	throttled bool          // actRetry: after a throttle (else after a failure)
	delay     time.Duration // actRetry: chosen delay, from the start of the attempt
	wait      time.Duration // actRetry: what is left of it now
	floor     time.Duration // actRetry: least time the next attempt is given
	failover  bool          // actRetry: the message is known not stored: another endpoint may take it
	kind      error         // actFail: a sentinel, or the context's cause
	ctxErr    error         // actFail: the caller's context error, if it ended
}

// callState is one send's mutable state, owned by its goroutine.
type callState struct {
	id            string
	transactional bool
	endpoints     []string // Producer: one name per connection
	target        string   // interceptor: the connection's target
	start         int      // index of the first endpoint
	unsent        bool     // set by the attempt: its request never left the client
	pinned        bool     // an attempt here had an unknown outcome: the message may be stored here

	attempts  int
	failures  int
	throttles int
	lastErr   error
	code      rocketryv1.Code
	reason    rocketryv1.ThrottleReason
}

func (st *callState) endpoint(i int) string {
	if len(st.endpoints) > 0 {
		return st.endpoints[i%len(st.endpoints)]
	}
	return st.target
}

// answer is what an attempt's error says, read from its gRPC status.
type answer struct {
	grpcCode codes.Code
	code     rocketryv1.Code
	reason   rocketryv1.ThrottleReason
	hint     time.Duration // google.rpc.RetryInfo's delay, 0 when absent
}

// details is what a status's details say.
type details struct {
	code   rocketryv1.Code
	reason rocketryv1.ThrottleReason
	hint   time.Duration
}

func detailsOf(s *status.Status) details {
	var d details
	if len(s.Proto().GetDetails()) == 0 {
		return d
	}
	for _, x := range s.Details() {
		switch x := x.(type) {
		case *rocketryv1.ErrorDetail:
			d.code, d.reason = x.GetCode(), x.GetReason()
		case *errdetails.RetryInfo:
			if x.GetRetryDelay() != nil {
				d.hint = x.GetRetryDelay().AsDuration()
			}
		}
	}
	return d
}

func readAnswer(err error) answer {
	s, ok := status.FromError(err)
	if !ok {
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return answer{grpcCode: codes.DeadlineExceeded}
		case errors.Is(err, context.Canceled):
			return answer{grpcCode: codes.Canceled}
		}
		return answer{grpcCode: codes.Unknown}
	}
	d := detailsOf(s)
	return answer{grpcCode: s.Code(), code: d.code, reason: d.reason, hint: d.hint}
}

// decide is the retry contract, in one place. From the error of the attempt
// that started at start (err == nil: it succeeded), it says what follows, in
// this order:
//
//  1. no error: done;
//  2. the caller's context ended (or the Producer's Close gave up waiting):
//     stop, with the context's cause;
//  3. the answer's class: 530 / RESOURCE_EXHAUSTED is throttled; UNAVAILABLE,
//     INTERNAL, UNKNOWN, ABORTED, the attempt's own timeout or cancellation
//     and a lost connection are failures; every other code (the 4xx family:
//     INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED,
//     UNAUTHENTICATED, FAILED_PRECONDITION, OUT_OF_RANGE, UNIMPLEMENTED,
//     DATA_LOSS) is never retried, and neither is a failure of a
//     transactional message, whose outcome is unknown, unless the request
//     never left the client;
//  4. the retry budget, which counts every throttle and failure;
//  5. attempts left (MaxAttempts counts the first);
//  6. the schedule of the class: its delay for retry n (n = throttles or
//     failures so far), lengthened by a RetryInfo hint, counted from the
//     start of the attempt; a schedule without retry n ends the send;
//  7. the caller's deadline: a wait that would end at or after it fails the
//     send now (ErrDeadlineTooShort).
//
// It updates st (counts, last error, code, reason) and the budget.
func (c *config) decide(ctx context.Context, abort <-chan struct{}, st *callState, err error, start, now time.Time) decision {
	if err == nil {
		return decision{act: actDone}
	}
	st.lastErr = err
	if ctx.Err() != nil {
		return decision{act: actFail, kind: context.Cause(ctx), ctxErr: ctx.Err()}
	}
	if dl, ok := ctx.Deadline(); ok && !now.Before(dl) {
		// Past the deadline, though ctx's timer has not fired yet.
		return decision{act: actFail, kind: context.DeadlineExceeded, ctxErr: context.DeadlineExceeded}
	}
	select {
	case <-abort:
		return decision{act: actFail, kind: ErrClosed}
	default:
	}

	a := readAnswer(err)
	st.code = a.code
	var throttled bool
	switch {
	case a.grpcCode == codes.ResourceExhausted || a.code == rocketryv1.Code_CODE_TOO_MANY_REQUESTS:
		throttled = true
		st.reason = a.reason
		st.throttles++
	case a.grpcCode == codes.Unavailable, a.grpcCode == codes.Internal, a.grpcCode == codes.Unknown,
		a.grpcCode == codes.Aborted, a.grpcCode == codes.DeadlineExceeded, a.grpcCode == codes.Canceled:
		st.failures++
		if st.transactional && !st.unsent {
			return decision{act: actFail, kind: ErrNotRetryable}
		}
	default:
		return decision{act: actFail, kind: ErrNotRetryable}
	}

	if c.budget.throttle() {
		return decision{act: actFail, throttled: throttled, kind: ErrRetryBudget}
	}
	if st.attempts >= c.maxAttempts {
		return decision{act: actFail, throttled: throttled, kind: ErrAttemptsExhausted}
	}

	sched, n := c.failure, st.failures
	if throttled {
		sched, n = c.throttle, st.throttles
	}
	delay, ok := sched.Delay(n, c.rand)
	if !ok {
		return decision{act: actFail, throttled: throttled, kind: ErrAttemptsExhausted}
	}
	elapsed := now.Sub(start)
	if throttled && a.hint > 0 && elapsed+a.hint > delay {
		delay = elapsed + a.hint
	}
	wait := max(delay-elapsed, 0)
	if dl, ok := ctx.Deadline(); ok && !now.Add(wait).Before(dl) {
		return decision{act: actFail, throttled: throttled, kind: ErrDeadlineTooShort}
	}
	d := decision{act: actRetry, throttled: throttled, delay: delay, wait: wait}
	if !throttled {
		// Known not stored: the request never left, or the broker said so,
		// of this attempt. After an unknown outcome on this endpoint the
		// message may be stored here already: the send stays (pinned).
		known := st.unsent || a.code == rocketryv1.Code_CODE_INTERNAL_ERROR || a.code == rocketryv1.Code_CODE_UNAVAILABLE
		st.pinned = st.pinned || !known
		d.failover = known && !st.pinned
	}
	if f, ok := sched.(backoff.AttemptFloor); ok {
		d.floor = f.MinAttemptTimeout()
	}
	return d
}

// run makes attempts of one call until decide says done or fail. attempt
// makes one attempt on endpoint i (an index to take modulo the number of
// endpoints), waiting for the endpoint's connection to be ready within the
// attempt's timeout when wait is set, and sets st.unsent when its request
// never left the client.
//
// Where a retry goes: after a throttle, to the same endpoint; after a
// failure whose message is known not stored (decision.failover), to the
// next endpoint; after an unknown outcome, to the same endpoint, whose
// store knows the message ID, so the retry cannot store it twice (unless
// WithFailoverOnUnknownOutcome). A retry after a failure that goes to the
// same endpoint waits for its connection (gRPC wait-for-ready) instead of
// failing fast, so it rides out a broker restart within its timeout.
//
// The attempt's timeout is kept by wd, the watchdog of the Producer or
// interceptor (watchdog.go): the attempt's context is cancelled when it
// passes, and the attempt's error then reads as a timeout
// (codes.DeadlineExceeded). When the caller's deadline comes first, the
// attempt runs on ctx itself. abort, when closed, stops the call with
// ErrClosed (nil: never). run returns nil or a *SendError; it emits the
// attempt, success, throttle and retry events, and leaves the final ones to
// the caller (failed).
func (c *config) run(ctx context.Context, abort <-chan struct{}, wd *watchdog, st *callState, attempt func(ctx context.Context, endpoint int, wait bool) error) error {
	ep := st.start
	timeout := c.attemptTimeout
	wait := false
	for {
		if c.limiter != nil {
			if d, ok := c.waitLimiter(ctx, abort); !ok {
				return st.sendError(d)
			}
		}
		st.attempts++
		if c.observer != nil {
			c.observer(Event{Kind: EventAttempt, MessageID: st.id, Attempt: st.attempts, Endpoint: st.endpoint(ep)})
		}
		start := time.Now()
		actx := ctx
		var cancel context.CancelCauseFunc
		var node *wdNode
		if dl, ok := ctx.Deadline(); !ok || dl.Sub(start) > timeout {
			// The attempt's timeout comes first: the watchdog ends the
			// attempt then (the caller's deadline, when sooner, ends it
			// on its own).
			actx, cancel = context.WithCancelCause(ctx)
			node = wd.arm(start.Add(timeout), cancel)
		}
		st.unsent = false
		err := attempt(actx, ep, wait)
		if node != nil {
			if wd.disarm(node) {
				err = timedOut(err)
			}
			cancel(nil)
		}
		if err == nil {
			c.budget.success()
			if c.observer != nil {
				c.observer(Event{Kind: EventSuccess, MessageID: st.id, Attempt: st.attempts, Endpoint: st.endpoint(ep)})
			}
			return nil
		}

		d := c.decide(ctx, abort, st, err, start, time.Now())
		if d.act != actRetry {
			if d.throttled {
				c.emitThrottle(st, ep, err)
			}
			return st.sendError(d)
		}
		why := "failure"
		if d.throttled {
			why = "throttled"
			c.emitThrottle(st, ep, err)
		}
		if c.observer != nil {
			c.observer(Event{Kind: EventRetry, MessageID: st.id, Attempt: st.attempts, Delay: d.delay, Why: why, Code: st.code, Endpoint: st.endpoint(ep), Err: err})
		}
		if c.logger.Enabled(ctx, slog.LevelDebug) {
			c.logger.LogAttrs(ctx, slog.LevelDebug, "producer: retry",
				slog.String("message_id", st.id), slog.Int("attempt", st.attempts),
				slog.String("why", why), slog.Duration("delay", d.delay),
				slog.String("endpoint", st.endpoint(ep)), slog.String("error", err.Error()))
		}
		if d.wait > 0 {
			if stop, ok := sleep(ctx, abort, d.wait); !ok {
				return st.sendError(stop)
			}
		}
		timeout = max(c.attemptTimeout, d.floor)
		wait = false
		if !d.throttled {
			prev := ep
			if d.failover || c.failoverAlways {
				ep++
			}
			wait = st.endpoint(ep) == st.endpoint(prev)
		}
	}
}

func (c *config) emitThrottle(st *callState, ep int, err error) {
	if c.observer != nil {
		c.observer(Event{Kind: EventThrottle, MessageID: st.id, Attempt: st.attempts, Code: st.code, Reason: st.reason, Endpoint: st.endpoint(ep), Err: err})
	}
}

// failed reports the end of a failed call: EventExhausted, then
// EventDeadLetter when the message was handed off.
func (c *config) failed(st *callState, se *SendError) {
	if c.observer != nil {
		c.observer(Event{Kind: EventExhausted, MessageID: st.id, Attempt: st.attempts, Code: st.code, Reason: st.reason, Err: se})
		if se.Spooled {
			c.observer(Event{Kind: EventDeadLetter, MessageID: st.id, Attempt: st.attempts, Code: st.code, Reason: st.reason, Err: se})
		}
	}
}

func (st *callState) sendError(d decision) *SendError {
	return &SendError{
		MessageID: st.id,
		Attempts:  st.attempts,
		Code:      st.code,
		Reason:    st.reason,
		Cause:     st.lastErr,
		kind:      d.kind,
		ctxErr:    d.ctxErr,
	}
}

// sleep waits d on a timer, or until ctx ends or abort closes; it says why
// it stopped early.
func sleep(ctx context.Context, abort <-chan struct{}, d time.Duration) (decision, bool) {
	t := newTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return decision{}, true
	case <-ctx.Done():
		return decision{act: actFail, kind: context.Cause(ctx), ctxErr: ctx.Err()}, false
	case <-abort:
		return decision{act: actFail, kind: ErrClosed}, false
	}
}

// waitLimiter waits for the rate limiter, failing at once when the wait
// would end at or after the caller's deadline.
func (c *config) waitLimiter(ctx context.Context, abort <-chan struct{}) (decision, bool) {
	r := c.limiter.Reserve()
	wait := r.Delay()
	if wait == 0 {
		return decision{}, true
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Add(wait).Before(dl) {
		r.Cancel()
		return decision{act: actFail, kind: ErrDeadlineTooShort}, false
	}
	d, ok := sleep(ctx, abort, wait)
	if !ok {
		r.Cancel()
	}
	return d, ok
}
