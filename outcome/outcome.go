// Package outcome is the vocabulary of one attempt of a send: its Outcome,
// what a classifier reads from the attempt's reply or error, and the Kind
// of that answer, which decides what follows (docs/retries.md's table).
//
// It is a leaf package, as brokercode is: the producer's executor and
// wire protocols (under producer/internal) return an Outcome and the
// producer's API speaks it (producer.Outcome and producer.OutcomeKind are
// aliases of Outcome and Kind, and producer.Stored, ... are Stored, ...),
// so an attempt's answer is one value on both sides, never copied.
package outcome

import (
	"strconv"
	"time"

	"github.com/rocketry-go/rocketry/brokercode"
)

// Kind is what one attempt's answer says of its message.
type Kind uint8

const (
	// Stored: the broker stored the message (or had it already).
	Stored Kind = iota + 1
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

var kindNames = [...]string{
	Stored:          "stored",
	Throttled:       "throttled",
	FailedNotStored: "failed-not-stored",
	FailedUnknown:   "failed-unknown",
	Permanent:       "permanent",
}

// String returns the kind's name, such as "throttled".
func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "OutcomeKind(" + strconv.Itoa(int(k)) + ")"
}

// Outcome is what a classifier reads from one attempt's reply or error.
type Outcome struct {
	// Kind is the class of the answer; it decides what follows.
	Kind Kind
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
