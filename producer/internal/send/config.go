package send

import (
	"context"
	"log/slog"
	"time"

	"golang.org/x/time/rate"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/brokercode"
	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/producer/internal/clock"
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
	// producer reports after the dead-letter hand-off); nil when nobody
	// watches, and then none is made.
	Event func(context.Context, Event)
}

// WaitMode says when a retry after a request that never left waits for
// its connection (gRPC wait-for-ready).
type WaitMode uint8

const (
	WaitReached WaitMode = iota // for a broker reached within ReachWindow (the default)
	WaitAlways                  // every time
	WaitNever                   // never
)

// EventKind is what an Event reports; the producer maps each to its
// public EventKind of the same name.
type EventKind uint8

const (
	EventAttempt  EventKind = iota + 1 // attempt Attempt is about to be made, to Endpoint
	EventSuccess                       // attempt Attempt stored the message
	EventThrottle                      // attempt Attempt was throttled
	EventRetry                         // attempt Attempt+1 follows after Delay
)

// Event is one thing that happened to one send: the public
// producer.Event's fields that the executor fills.
type Event struct {
	Kind     EventKind
	ID       string
	Attempt  int
	Delay    time.Duration
	Why      outcome.Kind
	Code     brokercode.Code
	Reason   brokercode.Reason
	Endpoint string
	Err      error
}

// End is why a send ended without storing its message; the producer maps
// each to its sentinel error in one place (newSendError).
type End uint8

const (
	EndNone              End = iota // not ended (a retry, or stored)
	EndAttemptsExhausted            // MaxAttempts reached, or the schedule has no further retry
	EndDeadlineTooShort             // the next wait would end at or after the caller's deadline
	EndNotRetryable                 // a 4xx, or an unknown outcome of a transactional message
	EndRetryBudget                  // the retry budget is spent
	EndClosed                       // the Producer's Close gave up waiting (Config.Closed)
	EndGroupFailed                  // an earlier message of its FIFO group failed (the producer's, before any attempt)
	EndContext                      // the caller's context ended: Failure.Cause is its cause
)

// Failure is a send's end without its message stored: the state from
// which the producer makes its *SendError.
type Failure struct {
	ID       string
	End      End
	Cause    error // EndContext: the context's cause
	CtxErr   error // the caller's context error, when it stopped the send
	Attempts int
	Last     outcome.Outcome   // the last attempt's outcome; zero when none was made
	Reason   brokercode.Reason // of the last throttled attempt
	MaybeAt  string            // the endpoint of the last attempt whose outcome was unknown
}
