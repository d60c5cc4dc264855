package broker

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

var (
	// ErrStopped is returned by Start, Serve and Restart when the broker
	// was stopped: a stopped broker does not serve again.
	ErrStopped = errors.New("broker: stopped")
	// ErrServing is returned by Start and Serve when the broker is
	// serving already.
	ErrServing = errors.New("broker: already serving")
	// ErrNotServing is returned by Restart when the broker was never
	// started.
	ErrNotServing = errors.New("broker: not serving")
	// ErrInvalidThrottle is returned (wrapped, with the field named) by
	// SetThrottle and New with WithThrottle when a Throttle field is out of
	// range.
	ErrInvalidThrottle = errors.New("broker: invalid Throttle")
	// ErrInvalidFaults is returned (wrapped, with the field named) by
	// Faults.Validate, SetFaults and New with WithFaults when a Faults
	// field is out of range.
	ErrInvalidFaults = errors.New("broker: invalid Faults")
)

// invalidError names what is wrong with a Throttle or Faults field; it
// wraps ErrInvalidThrottle or ErrInvalidFaults.
type invalidError struct {
	kind error
	msg  string
}

func (e *invalidError) Error() string { return e.msg }
func (e *invalidError) Unwrap() error { return e.kind }

// problem is what is wrong with a message refused as a bad request; the
// apache.rocketmq.v2 face answers each with its own code.
type problem uint8

const (
	problemOther    problem = iota // anything else
	problemTopic                   // the topic name
	problemID                      // the message id
	problemTag                     // the tag
	problemKey                     // a key
	problemProperty                // a property
	problemType                    // the message type is not the topic's
)

// refusal is why the broker did not store a request or one of its
// messages, in terms both faces map to their answers: rocketry.v1 to a
// gRPC status with an ErrorDetail (status), apache.rocketmq.v2 to a body
// status or, for 503 UNAVAILABLE, a gRPC status too.
type refusal struct {
	code    rocketryv1.Code
	reason  rocketryv1.ThrottleReason // TOO_MANY_REQUESTS only
	problem problem                   // BAD_REQUEST only
	fault   faultKind                 // the injected fault behind it, or faultNone
	grpc    codes.Code                // the gRPC code when it is not code's (the caller's context ended)
	retry   time.Duration             // > 0: when to try again
	// tag is the bracketed tag of a RocketMQ broker's SYSTEM_BUSY answer
	// the send queue gives (ReasonTimeoutCleanQueue, ReasonOverload); msg
	// is then that answer's text, verbatim.
	tag string
	// v2 is the apache.rocketmq.v2 code of a refusal of the proxy's
	// validation (rocketmq_validate.go); 0 maps code instead.
	v2  rocketmqv2.Code
	msg string
}

// status is the refusal as a rocketry.v1 gRPC status error.
func (r *refusal) status() error {
	gc := r.grpc
	if gc == codes.OK {
		gc = grpcCode(r.code)
	}
	return statusErrorCode(gc, r.code, r.reason, r.retry, r.msg)
}

// grpcCode maps a broker code to its gRPC code.
func grpcCode(c rocketryv1.Code) codes.Code {
	switch c {
	case rocketryv1.Code_CODE_BAD_REQUEST, rocketryv1.Code_CODE_MESSAGE_TOO_LARGE:
		return codes.InvalidArgument
	case rocketryv1.Code_CODE_TOPIC_NOT_FOUND:
		return codes.NotFound
	case rocketryv1.Code_CODE_UNAVAILABLE:
		return codes.Unavailable
	case rocketryv1.Code_CODE_TOO_MANY_REQUESTS:
		return codes.ResourceExhausted
	}
	return codes.Internal
}

// statusError is a gRPC status error with code's gRPC code and an
// ErrorDetail; retry > 0 adds a google.rpc.RetryInfo with that delay.
func statusError(code rocketryv1.Code, reason rocketryv1.ThrottleReason, retry time.Duration, msg string) error {
	return statusErrorCode(grpcCode(code), code, reason, retry, msg)
}

func statusErrorCode(gc codes.Code, code rocketryv1.Code, reason rocketryv1.ThrottleReason, retry time.Duration, msg string) error {
	return StatusError(gc, code, reason, retry, msg)
}

// StatusError is an answer as the broker makes it: a gRPC status of code
// gc and message msg with a rocketryv1.ErrorDetail (code, reason) and,
// when retry > 0, a google.rpc.RetryInfo with that delay. It is for stubs
// and tests of clients that read rocketry.v1's answers.
func StatusError(gc codes.Code, code rocketryv1.Code, reason rocketryv1.ThrottleReason, retry time.Duration, msg string) error {
	st := status.New(gc, msg)
	details := []protoMessage{&rocketryv1.ErrorDetail{Code: code, Reason: reason, Message: msg}}
	if retry > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(retry)})
	}
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st.Err()
}

// badMessage is a 400 BAD_REQUEST refusal for problem p.
func badMessage(p problem, format string, args ...any) *refusal {
	return &refusal{code: rocketryv1.Code_CODE_BAD_REQUEST, problem: p, msg: "broker: " + fmt.Sprintf(format, args...)}
}

// badRequest is a 400 BAD_REQUEST status error.
func badRequest(msg string) error {
	return badMessage(problemOther, "%s", msg).status()
}

type protoMessage = protoadapt.MessageV1
