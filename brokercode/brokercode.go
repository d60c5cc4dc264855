// Package brokercode holds the outcome codes and throttle reasons of a
// send, in rocketry's own terms: what the producer's errors, events and
// dead letters carry (producer.SendError, producer.Event,
// producer.DeadLetter, producer.CodeOf), whichever wire protocol the
// answer came on.
//
// Each wire protocol maps its own codes into these, as franz-go's kerr
// gives Kafka's: rocketry.v1's broker codes are these numbers (400, 404,
// 413, 500, 503, 530), and apache.rocketmq.v2's status codes (42900,
// 50001, ...) are read into the nearest one by the producer's
// RocketMQClassifier, which keeps the protocol's own number beside it
// (producer.SendError.WireCode). The numbers never change: a dead-letter
// store keeps them on disk.
//
// The package has no dependencies, so that code that only reads outcomes
// (an OpenTelemetry adapter, a dashboard) need not import the generated
// wire types.
package brokercode

import "strconv"

// Code is a broker's outcome code for a send. The zero value, Unspecified,
// means the answer carried no code (a lost connection, a timeout, a gRPC
// status without the broker's detail). Its numbers are rocketry.v1's Code.
type Code int32

// The codes. Each one's comment says what it means and whether a retry may
// succeed (Code.Retriable).
const (
	// Unspecified: the answer carried no code. Not retriable by its code:
	// what follows depends on the answer (producer.OutcomeKind).
	Unspecified Code = 0
	// BadRequest: the message is malformed (an empty topic, a bad
	// property); never retried.
	BadRequest Code = 400
	// TopicNotFound: the topic does not exist and the broker does not
	// create topics; never retried.
	TopicNotFound Code = 404
	// MessageTooLarge: the message is over a size limit of the broker or of
	// gRPC; never retried.
	MessageTooLarge Code = 413
	// InternalError: the broker failed on its side; retriable.
	InternalError Code = 500
	// Unavailable: the broker is shutting down, restarting or without its
	// replica; retriable.
	Unavailable Code = 503
	// TooManyRequests: the broker refused the message because it is
	// overloaded (the Reason says why); retriable, after a wait.
	TooManyRequests Code = 530
)

// codeInfo is one row of the code table.
type codeInfo struct {
	name      string
	retriable bool
}

var codeTable = map[Code]codeInfo{
	Unspecified:     {"UNSPECIFIED", false},
	BadRequest:      {"BAD_REQUEST", false},
	TopicNotFound:   {"TOPIC_NOT_FOUND", false},
	MessageTooLarge: {"MESSAGE_TOO_LARGE", false},
	InternalError:   {"INTERNAL_ERROR", true},
	Unavailable:     {"UNAVAILABLE", true},
	TooManyRequests: {"TOO_MANY_REQUESTS", true},
}

// Codes returns every code of the table, in increasing order.
func Codes() []Code {
	return []Code{Unspecified, BadRequest, TopicNotFound, MessageTooLarge, InternalError, Unavailable, TooManyRequests}
}

// String returns the code's name, such as "TOO_MANY_REQUESTS" (the name of
// rocketry.v1's code without its "CODE_" prefix), or "Code(n)" for a
// number outside the table.
func (c Code) String() string {
	if i, ok := codeTable[c]; ok {
		return i.name
	}
	return "Code(" + strconv.Itoa(int(c)) + ")"
}

// Retriable reports whether a send the broker answered with c may succeed
// when sent again: the broker refused for a passing cause (throttled, an
// internal error, unavailable). A code outside the table and Unspecified
// are not retriable by their code. The producer's retry decision is made
// from the whole answer (producer.OutcomeKind), of which this is the
// code's part.
func (c Code) Retriable() bool {
	return codeTable[c].retriable
}

// Reason says why a broker throttled a send (TooManyRequests). The zero
// value, ReasonUnspecified, means the broker did not say. Its numbers are
// rocketry.v1's ThrottleReason.
type Reason int32

// The throttle reasons.
const (
	// ReasonUnspecified: the broker gave no reason.
	ReasonUnspecified Reason = 0
	// ReasonStorageLoad: the broker's storage is loaded (consumers
	// re-reading old messages, a busy page cache).
	ReasonStorageLoad Reason = 1
	// ReasonBacklog: too many stored messages are not yet consumed.
	ReasonBacklog Reason = 2
	// ReasonSendRate: the broker's send capacity is spent.
	ReasonSendRate Reason = 3
)

var reasonNames = map[Reason]string{
	ReasonUnspecified: "UNSPECIFIED",
	ReasonStorageLoad: "STORAGE_LOAD",
	ReasonBacklog:     "BACKLOG",
	ReasonSendRate:    "SEND_RATE",
}

// Reasons returns every throttle reason, in increasing order.
func Reasons() []Reason {
	return []Reason{ReasonUnspecified, ReasonStorageLoad, ReasonBacklog, ReasonSendRate}
}

// String returns the reason's name, such as "BACKLOG" (the name of
// rocketry.v1's ThrottleReason without its "THROTTLE_REASON_" prefix), or
// "Reason(n)" for a number outside the table.
func (r Reason) String() string {
	if n, ok := reasonNames[r]; ok {
		return n
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}
