package producer

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/brokercode"
	"github.com/rocketry-go/rocketry/producer/internal/deadline"
)

// This file holds the retry contract (the retry table of docs/retries.md, ARCHITECTURE.md's
// executor): decide, the one function that says what follows an attempt,
// and the executor, which runs one send from its first attempt to its end.
// Producer.Send, the async sends and UnaryClientInterceptor all run it, over
// an attempter of their wire protocol.
//
// Counting: MaxAttempts counts attempts, the first included. The schedules
// number retries: retry n of the throttle schedule follows the n-th
// throttled attempt of the send, retry n of the failure schedule the n-th
// failed one, so that repeated throttling walks up the connection backoff
// while an occasional failure in between neither resets it nor advances it.

// newTimer makes the timer of every wait but the pacer's turns (those are
// pace.NewTimer's); tests swap both (and restore them with t.Cleanup) to
// observe or shorten waits.
var newTimer = time.NewTimer

// errAttemptTimeout is the cause of an attempt's context when its timeout
// passes.
var errAttemptTimeout = errors.New("producer: attempt timeout exceeded")

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
	throttled bool          // actRetry, actFail: the attempt was throttled
	delay     time.Duration // actRetry: chosen delay, from the start of the attempt
	wait      time.Duration // actRetry: what is left of it now
	timeout   time.Duration // actRetry: the time the next attempt is given
	failover  bool          // actRetry: the message is known not stored: the next endpoint may take it
	kind      error         // actFail: a sentinel, or the context's cause
	ctxErr    error         // actFail: the caller's context error, if it ended
}

// executor is one send's state, owned by the goroutine that runs it; the
// config is shared and read-only. One writer per field, as named: the
// transport that makes the executor sets the send's fixed facts before
// run; after that only run, decide and their helpers here write, on the
// send's goroutine (as grpc-go's clientStream owns its attempt).
type executor struct {
	cfg           *config   // set by the maker; read-only
	a             attempter // set by the maker: the wire protocol's call
	id            string    // set by the maker
	transactional bool      // set by the maker
	half          bool      // set by the maker: a RocketMQ 5 half message, retried when known not stored (transaction.go)
	ep            int       // written by the maker (first endpoint), pin and run: the endpoint of the next attempt
	pinned        bool      // written by pin and decide: an attempt had an unknown outcome, the message may be stored on ep
	maybeAt       string    // written by pin and run: the endpoint of the last attempt whose outcome was unknown
	stay          bool      // written by fifo (fifo.go): every attempt on ep, never another broker

	attempts  int               // written by run
	failures  int               // written by decide
	throttles int               // written by decide
	last      Outcome           // written by decide (and refuse, before any attempt): the last attempt's outcome
	reason    brokercode.Reason // written by decide: of the last throttled attempt

	// The throttle schedule's delay for retry drawnFor, drawn in advance:
	// the connection backoff gives the attempt after a wait the next
	// backoff as its time (see decide), and that same draw is then the
	// wait if the attempt is throttled again.
	drawn    time.Duration
	drawnFor int
	drawnOK  bool
}

// run makes attempts until the message is stored (nil) or the send fails
// for good (a *SendError). It emits every event of the send but the final
// ones, which follow the dead-letter hand-off (see finish).
//
// Where a retry goes: after a throttle, to the same endpoint; after a
// failure whose message is known not stored, to the next endpoint (another
// broker where there is one); after an unknown outcome, to the same
// endpoint for the rest of the send, since the broker there knows the
// message ID and so cannot store it twice (unless
// WithFailoverOnUnknownOutcome). A retry that stays on its endpoint after
// an unknown outcome waits for its connection (gRPC wait-for-ready) instead
// of failing fast, so it rides out the restart of the broker that may hold
// the message, within its timeout; other retries to the same endpoint wait
// only for a broker reached lately (WithWaitForReady changes it), so that
// an unreachable broker costs milliseconds, not an attempt timeout per
// attempt (connect.go).
//
// Each attempt's call runs on a context with the attempt's timeout (sent to
// the server as grpc-timeout), unless ctx's deadline comes first; a batched
// first attempt gives it to its batch instead; ctx ending
// stops the send wherever it is, with ctx's cause (ErrClosed when the
// Producer's Close gave up waiting).
func (x *executor) run(ctx context.Context) *SendError {
	c := x.cfg
	timeout := c.attemptTimeout
	wait := false
	paced := true // a retry after a failure leaves at once: it is not paced
	for {
		if d, ok := x.admit(ctx); !ok {
			return x.sendError(d)
		}
		pc := x.a.pacer(x.ep)
		if paced {
			if ok, late := pc.Wait(ctx); !ok {
				if late {
					return x.sendError(decision{act: actFail, kind: ErrDeadlineTooShort})
				}
				return x.sendError(stopped(ctx))
			}
		}
		x.attempts++
		if c.watched() {
			c.emit(ctx, Event{Kind: EventAttempt, MessageID: x.id, Attempt: x.attempts, Endpoint: x.a.endpoint(x.ep)})
		}
		start := time.Now()
		var adl time.Time // the attempt's deadline, when sooner than ctx's
		if dl, ok := ctx.Deadline(); !ok || dl.Sub(start) > timeout {
			adl = start.Add(timeout)
		}
		o, unsent := x.a.attempt(ctx, x.ep, wait, adl)
		if !unsent {
			x.a.reach(x.ep).sent(start)
		}
		pc.Record(paceResult(o), start, time.Now())
		if o.Kind == Stored {
			c.budget.success()
			if c.watched() {
				c.emit(ctx, Event{Kind: EventSuccess, MessageID: x.id, Attempt: x.attempts, Endpoint: x.a.endpoint(x.ep)})
			}
			return nil
		}

		if o.Kind == FailedUnknown && !unsent {
			x.maybeAt = pinName(x.a, x.ep) // the message may be stored there
		}
		d := x.decide(ctx, o, unsent, start, time.Now())
		if d.throttled && c.watched() {
			c.emit(ctx, Event{Kind: EventThrottle, MessageID: x.id, Attempt: x.attempts, Code: o.Code, Reason: o.Reason, Endpoint: x.a.endpoint(x.ep), Err: o.Err})
		}
		if d.act != actRetry {
			return x.sendError(d)
		}
		if c.watched() {
			c.emit(ctx, Event{Kind: EventRetry, MessageID: x.id, Attempt: x.attempts, Delay: d.delay, Why: o.Kind, Code: o.Code, Endpoint: x.a.endpoint(x.ep), Err: o.Err})
		}
		if c.logger.Enabled(ctx, slog.LevelDebug) {
			c.logger.LogAttrs(ctx, slog.LevelDebug, "producer: retry",
				slog.String("message_id", x.id), slog.Int("attempt", x.attempts),
				slog.String("why", o.Kind.String()), slog.Duration("delay", d.delay),
				slog.String("endpoint", x.a.endpoint(x.ep)), slog.Any("error", o.Err))
		}
		if d.wait > 0 && !sleep(ctx, d.wait) {
			return x.sendError(stopped(ctx))
		}
		timeout = d.timeout
		wait = false
		paced = d.throttled
		if !d.throttled {
			prev := x.ep
			if (d.failover || c.failoverAlways) && !x.stay {
				x.ep++
			}
			wait = x.a.endpoint(x.ep) == x.a.endpoint(prev) && x.waits()
		}
	}
}

// decide is the retry contract, in one place. From the outcome of the
// attempt that started at start (unsent: its request never left the
// client), it says what follows, in this order:
//
//  0. Stored: done;
//  1. the caller's context ended (or the Producer's Close gave up waiting):
//     stop, with the context's cause;
//  2. the outcome's kind: Throttled is retried on the throttle schedule;
//     FailedNotStored and FailedUnknown on the failure schedule, except for
//     a transactional message whose request left the client; Permanent
//     never;
//  3. the retry budget, which counts every throttle and failure;
//  4. attempts left (MaxAttempts counts the first);
//  5. the schedule of the kind: its delay for retry n (n = throttles or
//     failures so far), lengthened by the broker's hint, counted from the
//     start of the attempt; a schedule without retry n ends the send;
//  6. the caller's deadline: a wait that would end at or after it fails the
//     send now (ErrDeadlineTooShort).
//
// It updates the executor's counts, pin and last outcome, and the budget.
func (x *executor) decide(ctx context.Context, o Outcome, unsent bool, start, now time.Time) decision {
	c := x.cfg
	x.last = o
	if o.Kind == Stored {
		return decision{act: actDone}
	}
	if ctx.Err() != nil {
		return stopped(ctx)
	}
	if dl, ok := ctx.Deadline(); ok && !now.Before(dl) {
		// Past the deadline, though ctx's timer has not fired yet.
		return decision{act: actFail, kind: context.DeadlineExceeded, ctxErr: context.DeadlineExceeded}
	}

	throttled := false
	switch o.Kind {
	case Throttled:
		throttled = true
		x.throttles++
		x.reason = o.Reason
	case FailedNotStored, FailedUnknown:
		x.failures++
		if x.transactional && !unsent && (!x.half || o.Kind == FailedUnknown) {
			return decision{act: actFail, kind: ErrNotRetryable}
		}
	default:
		return decision{act: actFail, kind: ErrNotRetryable}
	}

	if c.budget.throttle() {
		return decision{act: actFail, throttled: throttled, kind: ErrRetryBudget}
	}
	if x.attempts >= c.maxAttempts {
		return decision{act: actFail, throttled: throttled, kind: ErrAttemptsExhausted}
	}

	var delay time.Duration
	var ok bool
	if throttled {
		delay, ok = x.throttleDelay(x.throttles)
	} else {
		delay, ok = c.failure.Delay(x.failures, c.rand)
	}
	if !ok {
		return decision{act: actFail, throttled: throttled, kind: ErrAttemptsExhausted}
	}
	elapsed := now.Sub(start)
	if throttled && o.Hint > 0 && elapsed+o.Hint > delay {
		delay = elapsed + o.Hint
	}
	wait := max(delay-elapsed, 0)
	if !deadline.Fits(ctx, now.Add(wait)) {
		return decision{act: actFail, throttled: throttled, kind: ErrDeadlineTooShort}
	}
	d := decision{act: actRetry, throttled: throttled, delay: delay, wait: wait, timeout: c.attemptTimeout}
	if throttled {
		// The connection backoff: the try after a backoff is given until
		// the next backoff ends, and at least MIN_CONNECT_TIMEOUT.
		if f, ok := c.throttle.(backoff.AttemptFloor); ok {
			next, _ := x.throttleDelay(x.throttles + 1)
			d.timeout = max(d.timeout, f.MinAttemptTimeout(), next)
		}
	} else {
		// Known not stored: the request never left, or the broker said so.
		// After an unknown outcome the message may be stored on this
		// endpoint already: the send stays (pinned).
		known := unsent || o.Kind == FailedNotStored
		x.pinned = x.pinned || !known
		d.failover = known && !x.pinned
	}
	return d
}

// pin starts a resend where its message may be stored: on pn's endpoint,
// as after an unknown outcome there (a retry stays unless
// WithFailoverOnUnknownOutcome). nil: no pin.
func (x *executor) pin(pn *pin) {
	if pn == nil {
		return
	}
	x.ep, x.pinned, x.maybeAt = pn.ep, true, pn.at
}

// waits reports whether a retry that stays on its endpoint after a failure
// waits for the connection (gRPC wait-for-ready): after an unknown outcome
// always, since the broker may hold the message; else as WithWaitForReady
// says, by default for a broker reached lately (connect.go).
func (x *executor) waits() bool {
	switch {
	case x.pinned || x.cfg.waitFor == waitAlways:
		return true
	case x.cfg.waitFor == waitNever:
		return false
	}
	return x.a.reach(x.ep).recent(time.Now())
}

// throttleDelay is the throttle schedule's delay for retry n, drawn once.
func (x *executor) throttleDelay(n int) (time.Duration, bool) {
	if x.drawnFor != n {
		x.drawn, x.drawnOK = x.cfg.throttle.Delay(n, x.cfg.rand)
		x.drawnFor = n
	}
	return x.drawn, x.drawnOK
}

// admit waits for the rate limiter before an attempt; it fails the send at
// once when the wait would end at or after the caller's deadline.
func (x *executor) admit(ctx context.Context) (decision, bool) {
	if x.cfg.limiter == nil {
		return decision{}, true
	}
	r := x.cfg.limiter.Reserve()
	wait := r.Delay()
	if wait == 0 {
		return decision{}, true
	}
	if !deadline.Fits(ctx, time.Now().Add(wait)) {
		r.Cancel()
		return decision{act: actFail, kind: ErrDeadlineTooShort}, false
	}
	if !sleep(ctx, wait) {
		r.Cancel()
		return stopped(ctx), false
	}
	return decision{}, true
}

// stopped is the decision when ctx ended: ErrClosed when the Producer's
// Close gave up waiting, else ctx's cause and error.
func stopped(ctx context.Context) decision {
	cause := context.Cause(ctx)
	if errors.Is(cause, ErrClosed) {
		return decision{act: actFail, kind: ErrClosed}
	}
	return decision{act: actFail, kind: cause, ctxErr: ctx.Err()}
}

// sleep waits d on a timer; false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := newTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// refuse ends the send before any attempt, for the reason o gives (the
// interceptor's check of the call's size limit).
func (x *executor) refuse(o Outcome, kind error) *SendError {
	x.last = o
	return x.sendError(decision{act: actFail, kind: kind})
}

// sendError is the send's failure, from its state now.
func (x *executor) sendError(d decision) *SendError {
	return newSendError(x.id, d, x.attempts, x.last, x.reason, x.maybeAt)
}

// finish reports the end of a failed send: EventExhausted, then
// EventDeadLetter when the message was handed off.
func (c *config) finish(ctx context.Context, se *SendError) {
	if c.watched() {
		c.emit(ctx, Event{Kind: EventExhausted, MessageID: se.MessageID, Attempt: se.Attempts, Code: se.Code, Reason: se.Reason, Err: se})
		if se.DeadLettered {
			c.emit(ctx, Event{Kind: EventDeadLetter, MessageID: se.MessageID, Attempt: se.Attempts, Code: se.Code, Reason: se.Reason, Err: se})
		}
	}
}
