// Package send is the executor of the producer: it runs one send from its
// first attempt to its end, over an Attempter of a wire protocol, and
// Decide, the one function that says what follows an attempt, holds the
// retry contract (docs/retries.md's retry table). It knows no protocol.
// Its vocabulary is the public leaf packages the producer's API speaks
// too: an attempt's answer is an outcome.Outcome, each event of a send an
// event.Event; a send that fails ends with a *senderr.SendError,
// End read as its sentinel error (End.Err).
//
// Counting: MaxAttempts counts attempts, the first included. The schedules
// number retries: retry n of the throttle schedule follows the n-th
// throttled attempt of the send, retry n of the failure schedule the n-th
// failed one, so that repeated throttling walks up the connection backoff
// while an occasional failure in between neither resets it nor advances it.
package send

import (
	"context"
	"errors"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/brokercode"
	"github.com/rocketry-go/rocketry/event"
	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/producer/internal/clock"
	"github.com/rocketry-go/rocketry/producer/internal/deadline"
	"github.com/rocketry-go/rocketry/senderr"
)

// Act is what follows an attempt.
type Act uint8

const (
	Done  Act = iota // stored
	Retry            // retry after Decision.Wait
	Fail             // give up: Decision.End says why
)

// Decision is Decide's answer.
type Decision struct {
	Act       Act
	Throttled bool          // Retry, Fail: the attempt was throttled
	Delay     time.Duration // Retry: chosen delay, from the start of the attempt
	Wait      time.Duration // Retry: what is left of it now
	Timeout   time.Duration // Retry: the time the next attempt is given
	Failover  bool          // Retry: the message is known not stored: the next endpoint may take it
	End       End           // Fail: why
	Cause     error         // Fail, EndContext: the context's cause
	CtxErr    error         // Fail: the caller's context error, if it ended
}

// Executor is one send's state, owned by the goroutine that runs it; the
// config is shared and read-only. One writer per field, as named: New
// sets the send's fixed facts (the exported fields) before Run; after that only Run, Decide and their
// helpers here write, on the send's goroutine (as grpc-go's clientStream
// owns its attempt).
type Executor struct {
	Cfg           *Config   // set by the maker; read-only
	A             Attempter // set by the maker: the wire protocol's call
	ID            string    // set by the maker
	Transactional bool      // set by the maker
	Half          bool      // set by the maker: a RocketMQ 5 half message, retried when known not stored
	EP            int       // written by the maker (first endpoint), Pin and Run: the endpoint of the next attempt
	Stay          bool      // set by the maker (a FIFO message): every attempt on EP, never another broker

	pinned  bool   // written by Pin and Decide: an attempt had an unknown outcome, the message may be stored on EP
	maybeAt string // written by Pin and Run: the endpoint of the last attempt whose outcome was unknown

	attempts  int               // written by Run
	failures  int               // written by Decide
	throttles int               // written by Decide
	last      outcome.Outcome   // written by Decide (and Refuse, before any attempt): the last attempt's outcome
	reason    brokercode.Reason // written by Decide: of the last throttled attempt

	// The throttle schedule's delay for retry drawnFor, drawn in advance:
	// the connection backoff gives the attempt after a wait the next
	// backoff as its time (see Decide), and that same draw is then the
	// wait if the attempt is throttled again.
	drawn    time.Duration
	drawnFor int
	drawnOK  bool
}

// Facts are a send's fixed facts, which the transport that makes its
// executor knows before the first attempt.
type Facts struct {
	ID            string
	Transactional bool
	Half          bool   // a RocketMQ 5 half message, retried when known not stored
	EP            int    // the first attempt's endpoint (a transport's round robin)
	Group         string // a FIFO message's group: every attempt on GroupEndpoint(Group)
	Pin           *Pin   // a resend: every attempt where the message may be stored
}

// Pin is where a resend starts and stays: endpoint EP, named At. Hold is
// the protocol's own, what EP indexes for the whole send: rocketry.v1's
// endpoints of a target with a scheme (held until the send ends), or a
// RocketMQ 5 route; nil when EP indexes the transport's fixed endpoints.
type Pin struct {
	EP   int
	At   string
	Hold any
}

// Init makes x, a zero Executor, the executor of one send with policy
// cfg over attempter a: the one constructor, which every transport and the
// interceptor use, on an executor that lives in their per-send call (not
// on the stack that the attempts' gRPC calls run on top of). Where its
// first attempt goes and whether its retries stay: a FIFO message's group
// (its first attempt on the group's endpoint, every retry there), then a
// resend's pin (on the pin's endpoint, as after an unknown outcome there:
// a retry stays unless FailoverAlways); else f.EP.
func (x *Executor) Init(cfg *Config, a Attempter, f Facts) {
	x.Cfg, x.A, x.ID, x.Transactional, x.Half, x.EP = cfg, a, f.ID, f.Transactional, f.Half, f.EP
	if f.Group != "" {
		x.EP, x.Stay = GroupEndpoint(f.Group), true
	}
	if f.Pin != nil {
		x.Pin(f.Pin.EP, f.Pin.At)
	}
}

// GroupEndpoint is the endpoint a group's sends go to, every attempt: the
// FNV-1a hash of the group, so that a group goes to one broker while the
// endpoints stay the same (a proxy in cluster mode hashes the group over
// its own queues again).
func GroupEndpoint(group string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(group))
	return int(h.Sum32() & 0x7fffffff)
}

// Attempts is the number of attempts made, counting the first.
func (x *Executor) Attempts() int { return x.attempts }

// Run makes attempts until the message is stored (failed is false, f nil)
// or the send fails for good (f, its *SendError). It emits every event of
// the send but the final ones, which follow the dead-letter hand-off.
//
// Where a retry goes: after a throttle, to the same endpoint; after a
// failure whose message is known not stored, to the next endpoint (another
// broker where there is one); after an unknown outcome, to the same
// endpoint for the rest of the send, since the broker there knows the
// message ID and so cannot store it twice (unless FailoverAlways). A retry
// that stays on its endpoint after an unknown outcome waits for its
// connection (gRPC wait-for-ready) instead of failing fast, so it rides out
// the restart of the broker that may hold the message, within its timeout;
// other retries to the same endpoint wait only for a broker reached lately
// (WaitFor changes it), so that an unreachable broker costs milliseconds,
// not an attempt timeout per attempt.
//
// Each attempt's call runs on a context with the attempt's timeout (sent to
// the server as grpc-timeout), unless ctx's deadline comes first; a batched
// first attempt gives it to its batch instead; ctx ending stops the send
// wherever it is, with ctx's cause (EndClosed when the Producer's Close
// gave up waiting).
func (x *Executor) Run(ctx context.Context) (f *senderr.SendError, failed bool) {
	c := x.Cfg
	clk := clock.Or(c.Clock)
	timeout := c.AttemptTimeout
	wait := false
	paced := true // a retry after a failure leaves at once: it is not paced
	for {
		if d, ok := x.admit(ctx); !ok {
			return x.failure(d), true
		}
		pc := x.A.Pacer(x.EP)
		if paced {
			if ok, late := pc.Wait(ctx, clk); !ok {
				if late {
					return x.failure(Decision{Act: Fail, End: EndDeadlineTooShort}), true
				}
				return x.failure(stopped(ctx, x.Cfg.Closed)), true
			}
		}
		x.attempts++
		if c.Event != nil {
			x.note(ctx, event.Attempt, nil, nil)
		}
		start := clk.Now()
		var adl time.Time // the attempt's deadline, when sooner than ctx's
		if dl, ok := ctx.Deadline(); !ok || dl.Sub(start) > timeout {
			adl = start.Add(timeout)
		}
		o, unsent := x.A.Attempt(ctx, x.EP, wait, adl)
		if !unsent {
			x.A.Reach(x.EP).sent(start)
		}
		end := clk.Now()
		pc.Record(paceResult(o), start, end)
		if o.Kind == outcome.Stored {
			c.Budget.success()
			if c.Event != nil {
				x.note(ctx, event.Success, nil, nil)
			}
			return nil, false
		}

		if o.Kind == outcome.FailedUnknown && !unsent {
			x.maybeAt = pinName(x.A, x.EP) // the message may be stored there
		}
		d := x.Decide(ctx, o, unsent, start, end)
		if d.Throttled && c.Event != nil {
			x.note(ctx, event.Throttle, &o, &d)
		}
		if d.Act != Retry {
			return x.failure(d), true
		}
		x.note(ctx, event.Retry, &o, &d)
		if d.Wait > 0 && !clk.Sleep(ctx, d.Wait) {
			return x.failure(stopped(ctx, x.Cfg.Closed)), true
		}
		timeout = d.Timeout
		wait = false
		paced = d.Throttled
		if !d.Throttled {
			prev := x.EP
			if (d.Failover || c.FailoverAlways) && !x.Stay {
				x.EP++
			}
			wait = x.A.Endpoint(x.EP) == x.A.Endpoint(prev) && x.waits()
		}
	}
}

// note emits the event of kind of the attempt made, with its outcome o and
// the decision d that followed (Throttle, Retry), and logs a retry at
// debug level. It is apart from Run so that its event and log attributes
// take no room on the stack of every send, whose attempts' gRPC calls run
// on top of it.
//
//go:noinline
func (x *Executor) note(ctx context.Context, kind event.Kind, o *outcome.Outcome, d *Decision) {
	c := x.Cfg
	if c.Event != nil {
		e := event.Event{Kind: kind, MessageID: x.ID, Attempt: x.attempts, Endpoint: x.A.Endpoint(x.EP)}
		switch kind {
		case event.Throttle:
			e.Code, e.Reason, e.Err = o.Code, o.Reason, o.Err
		case event.Retry:
			e.Delay, e.Why, e.Code, e.Err = d.Delay, o.Kind, o.Code, o.Err
		}
		c.Event(ctx, e)
	}
	if kind == event.Retry && c.Logger.Enabled(ctx, slog.LevelDebug) {
		c.Logger.LogAttrs(ctx, slog.LevelDebug, "producer: retry",
			slog.String("message_id", x.ID), slog.Int("attempt", x.attempts),
			slog.String("why", o.Kind.String()), slog.Duration("delay", d.Delay),
			slog.String("endpoint", x.A.Endpoint(x.EP)), slog.Any("error", o.Err))
	}
}

// Decide is the retry contract, in one place. From the outcome of the
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
//     send now (EndDeadlineTooShort).
//
// It updates the executor's counts, pin and last outcome, and the budget.
func (x *Executor) Decide(ctx context.Context, o outcome.Outcome, unsent bool, start, now time.Time) Decision {
	c := x.Cfg
	x.last = o
	if o.Kind == outcome.Stored {
		return Decision{Act: Done}
	}
	if ctx.Err() != nil {
		return stopped(ctx, x.Cfg.Closed)
	}
	if dl, ok := ctx.Deadline(); ok && !now.Before(dl) {
		// Past the deadline, though ctx's timer has not fired yet.
		return Decision{Act: Fail, End: EndContext, Cause: context.DeadlineExceeded, CtxErr: context.DeadlineExceeded}
	}

	throttled := false
	switch o.Kind {
	case outcome.Throttled:
		throttled = true
		x.throttles++
		x.reason = o.Reason
	case outcome.FailedNotStored, outcome.FailedUnknown:
		x.failures++
		if x.Transactional && !unsent && (!x.Half || o.Kind == outcome.FailedUnknown) {
			return Decision{Act: Fail, End: EndNotRetryable}
		}
	default:
		return Decision{Act: Fail, End: EndNotRetryable}
	}

	if c.Budget.throttle() {
		return Decision{Act: Fail, Throttled: throttled, End: EndRetryBudget}
	}
	if x.attempts >= c.MaxAttempts {
		return Decision{Act: Fail, Throttled: throttled, End: EndAttemptsExhausted}
	}

	var delay time.Duration
	var ok bool
	if throttled {
		delay, ok = x.throttleDelay(x.throttles)
	} else {
		delay, ok = c.Failure.Delay(x.failures, c.Rand)
	}
	if !ok {
		return Decision{Act: Fail, Throttled: throttled, End: EndAttemptsExhausted}
	}
	elapsed := now.Sub(start)
	if throttled && o.Hint > 0 && elapsed+o.Hint > delay {
		delay = elapsed + o.Hint
	}
	wait := max(delay-elapsed, 0)
	if !deadline.Fits(ctx, now.Add(wait)) {
		return Decision{Act: Fail, Throttled: throttled, End: EndDeadlineTooShort}
	}
	d := Decision{Act: Retry, Throttled: throttled, Delay: delay, Wait: wait, Timeout: c.AttemptTimeout}
	if throttled {
		// The connection backoff: the try after a backoff is given until
		// the next backoff ends, and at least MIN_CONNECT_TIMEOUT.
		if f, ok := c.Throttle.(backoff.AttemptFloor); ok {
			next, _ := x.throttleDelay(x.throttles + 1)
			d.Timeout = max(d.Timeout, f.MinAttemptTimeout(), next)
		}
	} else {
		// Known not stored: the request never left, or the broker said so.
		// After an unknown outcome the message may be stored on this
		// endpoint already: the send stays (pinned).
		known := unsent || o.Kind == outcome.FailedNotStored
		x.pinned = x.pinned || !known
		d.Failover = known && !x.pinned
	}
	return d
}

// Pin starts a resend where its message may be stored: on endpoint ep,
// named at, as after an unknown outcome there (a retry stays unless
// FailoverAlways).
func (x *Executor) Pin(ep int, at string) {
	x.EP, x.pinned, x.maybeAt = ep, true, at
}

// waits reports whether a retry that stays on its endpoint after a failure
// waits for the connection (gRPC wait-for-ready): after an unknown outcome
// always, since the broker may hold the message; else as WaitFor says, by
// default for a broker reached lately.
func (x *Executor) waits() bool {
	switch {
	case x.pinned || x.Cfg.WaitFor == WaitAlways:
		return true
	case x.Cfg.WaitFor == WaitNever:
		return false
	}
	return x.A.Reach(x.EP).recent(clock.Or(x.Cfg.Clock).Now())
}

// throttleDelay is the throttle schedule's delay for retry n, drawn once.
func (x *Executor) throttleDelay(n int) (time.Duration, bool) {
	if x.drawnFor != n {
		x.drawn, x.drawnOK = x.Cfg.Throttle.Delay(n, x.Cfg.Rand)
		x.drawnFor = n
	}
	return x.drawn, x.drawnOK
}

// admit waits for the rate limiter before an attempt; it fails the send at
// once when the wait would end at or after the caller's deadline.
func (x *Executor) admit(ctx context.Context) (Decision, bool) {
	if x.Cfg.Limiter == nil {
		return Decision{}, true
	}
	r := x.Cfg.Limiter.Reserve()
	wait := r.Delay()
	if wait == 0 {
		return Decision{}, true
	}
	clk := clock.Or(x.Cfg.Clock)
	if !deadline.Fits(ctx, clk.Now().Add(wait)) {
		r.Cancel()
		return Decision{Act: Fail, End: EndDeadlineTooShort}, false
	}
	if !clk.Sleep(ctx, wait) {
		r.Cancel()
		return stopped(ctx, x.Cfg.Closed), false
	}
	return Decision{}, true
}

// stopped is the decision when ctx ended: EndClosed when the Producer's
// Close gave up waiting (closed, Config.Closed), else ctx's cause and
// error.
func stopped(ctx context.Context, closed error) Decision {
	cause := context.Cause(ctx)
	if closed != nil && errors.Is(cause, closed) {
		return Decision{Act: Fail, End: EndClosed}
	}
	return Decision{Act: Fail, End: EndContext, Cause: cause, CtxErr: ctx.Err()}
}

// Stopped is the failure of the send of message id, stopped before any
// attempt because ctx ended: as Run says when ctx ends (closed is
// Config.Closed).
func Stopped(ctx context.Context, id string, closed error) *senderr.SendError {
	d := stopped(ctx, closed)
	f := senderr.NewSendError(d.End.Err(d.Cause), d.CtxErr)
	f.MessageID = id
	return f
}

// Refuse ends the send before any attempt, for the reason o gives (the
// interceptor's check of the call's size limit).
func (x *Executor) Refuse(o outcome.Outcome, end End) *senderr.SendError {
	x.last = o
	return x.failure(Decision{Act: Fail, End: end})
}

// failure is the send's failure, from its state now.
func (x *Executor) failure(d Decision) *senderr.SendError {
	f := senderr.NewSendError(d.End.Err(d.Cause), d.CtxErr)
	f.MessageID, f.Attempts, f.Reason, f.MaybeStoredAt = x.ID, x.attempts, x.reason, x.maybeAt
	f.Code, f.WireCode, f.Last, f.Cause = x.last.Code, x.last.WireCode, x.last.Kind, x.last.Err
	return f
}
