package producer

import (
	"errors"

	"github.com/rocketry-go/rocketry/brokercode"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	wirermq "github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq"
	wirev1 "github.com/rocketry-go/rocketry/producer/internal/wire/v1"
)

// GRPCClassifier reads an attempt's gRPC status, with rocketry.v1's
// ErrorDetail and google.rpc.RetryInfo when the server sent them. It is the
// classifier of the Producer on rocketry.v1 and the interceptor's default.
//
//   - OK: Stored.
//   - RESOURCE_EXHAUSTED, or the detail's 530 TOO_MANY_REQUESTS: Throttled,
//     with the detail's reason and RetryInfo's delay as the hint; but
//     gRPC's own RESOURCE_EXHAUSTED for a message over a size limit
//     ("larger than max") is Permanent, MESSAGE_TOO_LARGE.
//   - The detail's 500 INTERNAL_ERROR or 503 UNAVAILABLE: FailedNotStored
//     (the rocketry broker stores nothing when it answers them).
//   - UNAVAILABLE, INTERNAL, UNKNOWN, ABORTED, DEADLINE_EXCEEDED (the
//     attempt's timeout), CANCELLED (a lost connection) without the detail,
//     and errors that are not statuses: FailedUnknown.
//   - Every other code (INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
//     PERMISSION_DENIED, UNAUTHENTICATED, FAILED_PRECONDITION, OUT_OF_RANGE,
//     UNIMPLEMENTED, DATA_LOSS): Permanent.
var GRPCClassifier Classifier = grpcClassifier{}

type grpcClassifier struct{}

func (grpcClassifier) Classify(_ any, err error) Outcome { return classifyError(err) }

// autoClassifier is the interceptor's default: an apache.rocketmq.v2 reply
// (one with a body Status) is read by RocketMQClassifier, anything else by
// GRPCClassifier.
type autoClassifier struct{}

func (autoClassifier) Classify(reply any, err error) Outcome {
	if _, ok := reply.(interface{ GetStatus() *rocketmqv2.Status }); ok {
		return RocketMQClassifier.Classify(reply, err)
	}
	return classifyError(err)
}

// classifyError classifies a gRPC error; nil is Stored. rocketry.v1's
// reading (producer/internal/wire/v1), as the producer returns it.
func classifyError(err error) Outcome {
	return wirev1.Classify(err)
}

// errOutcome reads an error returned by a send or an attempt: a *SendError
// (its last attempt's outcome), an error that knows its outcome (a
// RocketMQ 5 status), else a gRPC status.
func errOutcome(err error) Outcome {
	var se *SendError
	if errors.As(err, &se) {
		o := Outcome{Kind: se.Last, Code: se.Code, WireCode: se.WireCode, Reason: se.Reason, Err: se.Cause}
		if o.Kind == 0 && o.Code == brokercode.TooManyRequests {
			o.Kind = Throttled
		}
		return o
	}
	var rs *RocketMQStatusError
	if errors.As(err, &rs) {
		return wirermq.StatusOutcome(rs)
	}
	return classifyError(err) // a context error, not a status, is FailedUnknown there

}

// IsThrottled reports whether err is, or wraps, a throttling answer (gRPC
// RESOURCE_EXHAUSTED other than a size limit, rocketry.v1's 530,
// apache.rocketmq.v2's 42900), or is a *SendError whose last attempt was
// throttled. It reads err with the same classifiers as the retry decisions.
func IsThrottled(err error) bool {
	return err != nil && errOutcome(err).Kind == Throttled
}

// CodeOf returns the broker code err carries, in the project's terms
// (package brokercode, whichever protocol answered): a
// *SendError's Code, or the code its classifier reads from a gRPC status
// or a RocketMQ 5 status; brokercode.Unspecified when there is none.
func CodeOf(err error) brokercode.Code {
	if err == nil {
		return brokercode.Unspecified
	}
	return errOutcome(err).Code
}
