package producer

import (
	"strconv"
	"time"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// Observer is called on every event of every send (WithObserver). It runs on
// the sending goroutine, must be safe for concurrent use and must not block.
type Observer func(Event)

// EventKind says what an Event is about.
type EventKind int

const (
	// EventAttempt: attempt Attempt is about to be made, to Endpoint.
	EventAttempt EventKind = iota + 1
	// EventSuccess: attempt Attempt stored the message.
	EventSuccess
	// EventRetry: attempt Attempt failed with Err and attempt Attempt+1
	// will be made after Delay, counted from the start of attempt Attempt;
	// Why is the outcome's kind.
	EventRetry
	// EventThrottle: attempt Attempt was throttled (rocketry.v1 530,
	// apache.rocketmq.v2 42900, RESOURCE_EXHAUSTED) for Reason. An
	// EventRetry or EventExhausted follows.
	EventThrottle
	// EventExhausted: the send failed for good after Attempt attempts; Err
	// is its *SendError (errors.Is says why: attempts exhausted, deadline
	// too short, not retryable, retry budget, closed, cancelled).
	EventExhausted
	// EventDeadLetter: the failed message was handed to the fallback or
	// written to the spool; Err is its *SendError.
	EventDeadLetter
)

var eventNames = [...]string{
	EventAttempt:    "attempt",
	EventSuccess:    "success",
	EventRetry:      "retry",
	EventThrottle:   "throttle",
	EventExhausted:  "exhausted",
	EventDeadLetter: "dead-letter",
}

// String returns the kind's name, such as "retry".
func (k EventKind) String() string {
	if k > 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event is one thing that happened to one send.
type Event struct {
	Kind EventKind
	// MessageID is the message's ID; for a call through the interceptor,
	// the ID of the first message of a SendMessageRequest, else empty.
	MessageID string
	// Attempt is the 1-based attempt number this event is about.
	Attempt int
	// Delay (EventRetry) is the wait chosen before the next attempt,
	// counted from the start of attempt Attempt: the schedule's delay,
	// lengthened by a broker's RetryInfo hint if that ends later.
	Delay time.Duration
	// Why (EventRetry) is the kind of the attempt's outcome: Throttled,
	// FailedNotStored or FailedUnknown.
	Why OutcomeKind
	// Code is the broker code of the attempt's answer, CODE_UNSPECIFIED
	// when it had none.
	Code rocketryv1.Code
	// Reason (EventThrottle) is the throttle reason.
	Reason rocketryv1.ThrottleReason
	// Endpoint is the target of the attempt.
	Endpoint string
	// Err is the attempt's error (EventRetry, EventThrottle) or the send's
	// *SendError (EventExhausted, EventDeadLetter).
	Err error
}
