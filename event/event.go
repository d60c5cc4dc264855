// Package event is the vocabulary of what happens to a send: an Event and
// its Kind, as the producer's observer and hook see them.
//
// It is a leaf package, as brokercode and outcome are: the producer's
// executor (under producer/internal) makes the events of a send's
// attempts as Events, and the producer's API speaks them
// (producer.Event and producer.EventKind are aliases of Event and Kind,
// producer.EventAttempt, ... are Attempt, ...), so an event is made once,
// never copied from one type into another.
package event

import (
	"strconv"
	"time"

	"github.com/rocketry-go/rocketry/brokercode"
	"github.com/rocketry-go/rocketry/outcome"
)

// Kind says what an Event is about.
type Kind int

const (
	// Attempt: attempt Attempt is about to be made, to Endpoint.
	Attempt Kind = iota + 1
	// Success: attempt Attempt stored the message.
	Success
	// Retry: attempt Attempt failed with Err and attempt Attempt+1
	// will be made after Delay, counted from the start of attempt Attempt;
	// Why is the outcome's kind.
	Retry
	// Throttle: attempt Attempt was throttled (rocketry.v1 530,
	// apache.rocketmq.v2 42900, RESOURCE_EXHAUSTED) for Reason. A
	// Retry or Exhausted event follows.
	Throttle
	// Exhausted: the send failed for good after Attempt attempts; Err
	// is its *producer.SendError (errors.Is says why: attempts exhausted,
	// deadline too short, not retryable, retry budget, closed, cancelled).
	Exhausted
	// DeadLetter: the failed message was handed to the dead-letter
	// sink (producer.WithFallback's function, or a store); Err is its
	// *producer.SendError.
	DeadLetter
	// Commit: the transaction of half message MessageID was committed
	// (producer.Transaction.Commit, or, with Check, the answer to the
	// broker's check of an orphaned transaction) after Attempt
	// EndTransaction attempts; Err is set when it failed. It is no send's
	// event: a producer.Hook sees it with the caller's context (the
	// producer's for a check).
	Commit
	// Rollback: the same, for a roll back.
	Rollback
	// Recall: producer.Producer.Recall of the timed message MessageID
	// (empty when the server did not say) after Attempt attempts; Err is
	// set when it failed. No send's event either.
	Recall
)

var kindNames = [...]string{
	Attempt:    "attempt",
	Success:    "success",
	Retry:      "retry",
	Throttle:   "throttle",
	Exhausted:  "exhausted",
	DeadLetter: "dead-letter",
	Commit:     "commit",
	Rollback:   "rollback",
	Recall:     "recall",
}

// String returns the kind's name, such as "retry".
func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event is one thing that happened to one send.
type Event struct {
	Kind Kind
	// MessageID is the message's ID; for a call through the interceptor,
	// the ID of the first message of a SendMessageRequest, else empty.
	MessageID string
	// Attempt is the 1-based attempt number this event is about.
	Attempt int
	// Delay (Retry) is the wait chosen before the next attempt,
	// counted from the start of attempt Attempt: the schedule's delay,
	// lengthened by a broker's RetryInfo hint if that ends later.
	Delay time.Duration
	// Why (Retry) is the kind of the attempt's outcome: outcome.Throttled,
	// outcome.FailedNotStored or outcome.FailedUnknown.
	Why outcome.Kind
	// Code is the broker code of the attempt's answer, brokercode.Unspecified
	// when it had none.
	Code brokercode.Code
	// Reason (Throttle) is the throttle reason.
	Reason brokercode.Reason
	// Endpoint is the target of the attempt.
	Endpoint string
	// Err is the attempt's error (Retry, Throttle) or the send's
	// *producer.SendError (Exhausted, DeadLetter), or the step's error
	// (Commit, Rollback, Recall).
	Err error
	// Check (Commit, Rollback) marks the answer to the broker's
	// check of an orphaned transaction (producer.WithTransactionChecker).
	Check bool
}
