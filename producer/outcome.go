package producer

import (
	"strconv"
	"time"

	"github.com/rocketry-go/rocketry/brokercode"
	"github.com/rocketry-go/rocketry/producer/internal/send"
)

// OutcomeKind is what one attempt's answer says of its message.
type OutcomeKind uint8

const (
	// Stored: the broker stored the message (or had it already).
	Stored OutcomeKind = iota + 1
	// Throttled: the broker refused the message because it is overloaded
	// (rocketry.v1 530, apache.rocketmq.v2 42900, gRPC RESOURCE_EXHAUSTED);
	// the message is known not stored.
	Throttled
	// FailedNotStored: the attempt failed and the broker said it stored
	// nothing (or the request never reached it).
	FailedNotStored
	// FailedUnknown: the attempt failed and the message may or may not be
	// stored: its timeout, a connection lost in flight, a 5xx without the
	// broker's word.
	FailedUnknown
	// Permanent: the broker refused the message for a reason that a retry
	// cannot change (4xx); it is not stored.
	Permanent
)

var outcomeNames = [...]string{
	Stored:          "stored",
	Throttled:       "throttled",
	FailedNotStored: "failed-not-stored",
	FailedUnknown:   "failed-unknown",
	Permanent:       "permanent",
}

// String returns the kind's name, such as "throttled".
func (k OutcomeKind) String() string {
	if int(k) < len(outcomeNames) && outcomeNames[k] != "" {
		return outcomeNames[k]
	}
	return "OutcomeKind(" + strconv.Itoa(int(k)) + ")"
}

// Outcome is what a Classifier reads from one attempt's reply or error.
type Outcome struct {
	// Kind is the class of the answer; it decides what follows.
	Kind OutcomeKind
	// Code is the broker code in the project's terms, whichever protocol
	// answered (package brokercode: TooManyRequests for any throttle,
	// InternalError and Unavailable for failures the broker reported, the
	// 4xx family), or brokercode.Unspecified when the answer carried none.
	Code brokercode.Code
	// WireCode is the code as the protocol spelt it: the rocketry.v1 code,
	// the apache.rocketmq.v2 status code (42900, 50001, ...), or 0.
	WireCode int32
	// Reason is the throttle reason, when the broker gave one.
	Reason brokercode.Reason
	// Hint is the broker's suggested wait before a retry (google.rpc.RetryInfo);
	// 0 when absent. It may lengthen the schedule's wait, never shorten it.
	Hint time.Duration
	// Err is the attempt's error: the gRPC error, or for a protocol that
	// answers in the response body, an error made from the body's status.
	// nil when Kind is Stored.
	Err error
}

// A Classifier turns the reply or error of one attempt into an Outcome. One
// exists per wire protocol: GRPCClassifier reads gRPC statuses (and the
// rocketry.v1 ErrorDetail), RocketMQClassifier reads apache.rocketmq.v2
// response bodies. A Classifier must be safe for concurrent use.
type Classifier interface {
	// Classify is called after every attempt with its reply (as given to
	// the call) and its error (nil when the call returned OK).
	Classify(reply any, err error) Outcome
}

// internal is o as the executor reads it (producer/internal/send): a
// field copy, once per attempt, by each attempter's Attempt. The kinds'
// values are the same.
func (o Outcome) internal() send.Outcome {
	return send.Outcome{Kind: send.Kind(o.Kind), Code: o.Code, WireCode: o.WireCode, Reason: o.Reason, Hint: o.Hint, Err: o.Err}
}

// publicOutcome is o (producer/internal/send) as the public Outcome: the
// inverse of internal, a field copy. The kinds' values are the same.
func publicOutcome(o send.Outcome) Outcome {
	return Outcome{Kind: OutcomeKind(o.Kind), Code: o.Code, WireCode: o.WireCode, Reason: o.Reason, Hint: o.Hint, Err: o.Err}
}
