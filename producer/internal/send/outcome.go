package send

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/producer/internal/pace"
)

// ErrAttemptTimeout is the cause of an attempt's context when its timeout
// passes.
var ErrAttemptTimeout = errors.New("producer: attempt timeout exceeded")

// AttemptContext is ctx with the attempt's deadline, when it has one; its
// expiry reads as the attempt's timeout (ErrAttemptTimeout).
//
// A context with a deadline costs a timer, and grpc-go's call under it a
// map of children: seven allocations, more than all of rocketry's own on a
// send. So on a Shared context (a producer's own, under the sends of
// callers whose context cannot end), attempts whose deadlines fall in the
// same slotWidth share one context, whose deadline is the slot's start:
// at most slotWidth sooner than asked, which only a deadline at least
// minShared away gets. Its cancel func then does nothing: the shared
// context ends at its deadline, or with ctx.
func AttemptContext(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if deadline.IsZero() {
		return ctx, func() {}
	}
	if s, ok := ctx.(*Shared); ok {
		if d := time.Until(deadline); d >= minShared && d <= maxShared {
			return s.deadline(deadline), func() {}
		}
	}
	return context.WithDeadlineCause(ctx, deadline, ErrAttemptTimeout)
}

const (
	slotWidth = 10 * time.Millisecond // attempts whose deadlines fall this close share a context
	minShared = time.Second           // a deadline this far away or farther may be slotWidth early: by 1% at most
	maxShared = 24 * time.Hour        // a deadline farther away has its own context (and its unix ns may not fit an int64)
)

// Shared is a long-lived context under which attempts share their
// deadlines' contexts (AttemptContext): a producer's, under the sends of
// callers whose context cannot end.
type Shared struct {
	context.Context
	// The latest slot of each of a few deadline keys, so that sends with
	// different attempt timeouts do not take turns replacing one slot.
	slots [8]atomic.Pointer[slot]
}

// NewShared is a Shared context under ctx.
func NewShared(ctx context.Context) *Shared { return &Shared{Context: ctx} }

// slot is a context of the deadlines in [at, at+slotWidth).
type slot struct {
	at     int64 // the deadline, unix ns: a multiple of slotWidth
	ctx    context.Context
	cancel context.CancelFunc // never called: the deadline or the parent ends ctx
}

// deadline is the context of deadline's slot: one context, one timer for
// every attempt whose deadline falls in it.
func (s *Shared) deadline(deadline time.Time) context.Context {
	at := deadline.UnixNano() / int64(slotWidth) * int64(slotWidth)
	p := &s.slots[(at/int64(slotWidth))%int64(len(s.slots))]
	if sl := p.Load(); sl != nil && sl.at == at {
		return sl.ctx
	}
	sl := &slot{at: at}
	sl.ctx, sl.cancel = context.WithDeadlineCause(s.Context, time.Unix(0, at), ErrAttemptTimeout)
	p.Store(sl) // two racing attempts may make two: each is used, and ends
	return sl.ctx
}

// Attempter makes the attempts of one send over one wire protocol. The
// executor owns every decision (what follows, where and when); an attempter
// only carries an attempt to endpoint ep and back.
type Attempter interface {
	// Attempt makes one attempt on endpoint ep (an index the attempter
	// takes modulo its endpoints; ep+1 is the next one, on another broker
	// where there is one), waiting for the connection within ctx when
	// waitForReady is set. deadline, when not zero, is the attempt's own
	// deadline, sooner than ctx's: the attempter makes it the deadline of
	// its call (AttemptContext), or of the batch the message joins. It
	// returns the attempt's outcome and whether the request never left
	// the client (so the message is known not stored).
	Attempt(ctx context.Context, ep int, waitForReady bool, deadline time.Time) (o outcome.Outcome, unsent bool)
	// Endpoint names endpoint ep for events and logs; two indexes with the
	// same name are the same broker.
	Endpoint(ep int) string
	// Pacer is the throttle state of an attempt to endpoint ep.
	Pacer(ep int) pace.Pace
	// Reach is when a request last reached endpoint ep's broker: a retry
	// that stays there after a request that never left waits for the
	// connection when it is recent. nil: none kept. Called after an
	// attempt on ep, or before a retry to the same broker.
	Reach(ep int) *Reach
}

// PinNamer is an Attempter whose endpoints are pinned by a name that says
// more than their event name (RocketMQ 5: the broker's name and endpoints).
type PinNamer interface {
	PinName(ep int) string
}

// pinName is what a send's MaybeStoredAt says of endpoint ep of a: its
// pin name where a has one, else its endpoint name.
func pinName(a Attempter, ep int) string {
	if pn, ok := a.(PinNamer); ok {
		return pn.PinName(ep)
	}
	return a.Endpoint(ep)
}

// ReachWindow is how long after a request last reached a broker a retry
// to it still waits for its connection by default (WaitReached).
const ReachWindow = 10 * time.Second

// Reach is when a request last reached a broker (unix nanoseconds, to the
// second: it is written at most once a second); 0: never.
type Reach struct{ last atomic.Int64 }

// SetLast sets the time a request last reached the broker to t: for the
// tests that age it.
func (r *Reach) SetLast(t time.Time) { r.last.Store(t.UnixNano()) }

// sent notes an attempt, started at start, whose request left.
func (r *Reach) sent(start time.Time) {
	if r == nil {
		return
	}
	if t := start.UnixNano(); t-r.last.Load() >= int64(time.Second) {
		r.last.Store(t)
	}
}

// recent reports whether a request reached the broker within ReachWindow
// of now; a nil Reach (the interceptor keeps none) always is.
func (r *Reach) recent(now time.Time) bool {
	if r == nil {
		return true
	}
	last := r.last.Load()
	return last != 0 && now.UnixNano()-last < int64(ReachWindow)
}
