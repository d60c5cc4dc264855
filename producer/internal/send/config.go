package send

import (
	"context"
	"log/slog"
	"time"

	"golang.org/x/time/rate"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/event"
	"github.com/rocketry-go/rocketry/producer/internal/clock"
	"github.com/rocketry-go/rocketry/senderr"
)

// Config is the retry policy the executor follows, as the producer's
// options set it (their docs say what each means). It is shared by the
// sends of a Producer or an interceptor and read-only once they start.
type Config struct {
	MaxAttempts    int
	AttemptTimeout time.Duration
	Throttle       backoff.Schedule // the throttle schedule
	Failure        backoff.Schedule // the failure schedule
	Rand           backoff.Rand
	Limiter        *rate.Limiter // nil: no rate limit
	Budget         *Budget       // nil: no retry budget
	FailoverAlways bool          // fail over after an unknown outcome too
	WaitFor        WaitMode
	Logger         *slog.Logger // retries at debug level; never nil
	Clock          clock.Clock  // the time of attempts and waits; nil: the wall clock

	// Closed is the cause with which the Producer's Close cancels the
	// sends it gave up waiting for: a send stopped with it ends EndClosed.
	Closed error
	// Event receives the events of a send (but its end, which the
	// producer reports after the dead-letter hand-off): event.Attempt,
	// Success, Throttle and Retry; nil when nobody watches, and then none
	// is made.
	Event func(context.Context, event.Event)
}

// WaitMode says when a retry after a request that never left waits for
// its connection (gRPC wait-for-ready).
type WaitMode uint8

const (
	WaitReached WaitMode = iota // for a broker reached within ReachWindow (the default)
	WaitAlways                  // every time
	WaitNever                   // never
)

// End is why a send ended without storing its message; Err reads it as
// its sentinel error (package senderr), in one place.
type End uint8

const (
	EndNone              End = iota // not ended (a retry, or stored)
	EndAttemptsExhausted            // MaxAttempts reached, or the schedule has no further retry
	EndDeadlineTooShort             // the next wait would end at or after the caller's deadline
	EndNotRetryable                 // a 4xx, or an unknown outcome of a transactional message
	EndRetryBudget                  // the retry budget is spent
	EndClosed                       // the Producer's Close gave up waiting (Config.Closed)
	EndGroupFailed                  // an earlier message of its FIFO group failed (the producer's, before any attempt)
	EndContext                      // the caller's context ended: Decision.Cause is its cause
)

// Err is end as the error a *SendError matches (errors.Is): its sentinel,
// or, for EndContext, the context's cause; nil for EndNone.
func (end End) Err(cause error) error {
	switch end {
	case EndAttemptsExhausted:
		return senderr.ErrAttemptsExhausted
	case EndDeadlineTooShort:
		return senderr.ErrDeadlineTooShort
	case EndNotRetryable:
		return senderr.ErrNotRetryable
	case EndRetryBudget:
		return senderr.ErrRetryBudget
	case EndClosed:
		return senderr.ErrClosed
	case EndGroupFailed:
		return senderr.ErrGroupFailed
	case EndContext:
		return cause
	}
	return nil
}
