package producer

import "github.com/rocketry-go/rocketry/outcome"

// OutcomeKind is what one attempt's answer says of its message. It is
// outcome.Kind (package github.com/rocketry-go/rocketry/outcome, which
// documents its values), the kind the executor reads.
type OutcomeKind = outcome.Kind

// The kinds of an attempt's outcome (outcome.Stored, ...; see there).
const (
	// Stored: the broker stored the message (or had it already).
	Stored = outcome.Stored
	// Throttled: the broker refused the message because it is overloaded;
	// the message is known not stored.
	Throttled = outcome.Throttled
	// FailedNotStored: the attempt failed and the broker said it stored
	// nothing (or the request never reached it).
	FailedNotStored = outcome.FailedNotStored
	// FailedUnknown: the attempt failed and the message may or may not be
	// stored.
	FailedUnknown = outcome.FailedUnknown
	// Permanent: the broker refused the message for a reason that a retry
	// cannot change (4xx); it is not stored.
	Permanent = outcome.Permanent
)

// Outcome is what a Classifier reads from one attempt's reply or error.
// It is outcome.Outcome, which documents its fields: the executor reads
// the value a Classifier returns as it is.
type Outcome = outcome.Outcome

// A Classifier turns the reply or error of one attempt into an Outcome. One
// exists per wire protocol: GRPCClassifier reads gRPC statuses (and the
// rocketry.v1 ErrorDetail), RocketMQClassifier reads apache.rocketmq.v2
// response bodies. A Classifier must be safe for concurrent use.
type Classifier interface {
	// Classify is called after every attempt with its reply (as given to
	// the call) and its error (nil when the call returned OK).
	Classify(reply any, err error) Outcome
}
