// Package wirev1 is the rocketry.v1 wire protocol under the producer: its
// transport (Transport, a wire.Transport: the fixed endpoints or a
// target's resolver, the round robin, the IDs), its attempter (sendCall,
// one SendMessage per attempt), its batch sender (v1Batch), the resolver
// of a target with a scheme (targets.go), and how an attempt's gRPC error
// is read (Classify). Its errors are package senderr's (the sentinels,
// ConnectError) and wire's TargetError, which the producer gives as they
// are.
package wirev1

import (
	"strings"

	"github.com/rocketry-go/rocketry/brokercode"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/outcome"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Classify classifies a gRPC error, reading rocketry.v1's ErrorDetail and
// google.rpc.RetryInfo when the server sent them; nil is Stored. It is
// producer.GRPCClassifier's reading (whose doc lists the cases), as the
// producer returns it.
func Classify(err error) outcome.Outcome {
	if err == nil {
		return outcome.Outcome{Kind: outcome.Stored}
	}
	s, ok := status.FromError(err)
	if !ok {
		// Not a status: the context's own error, or a transport error.
		return outcome.Outcome{Kind: outcome.FailedUnknown, Err: err}
	}
	o := outcome.Outcome{Err: err}
	if len(s.Proto().GetDetails()) > 0 {
		for _, d := range s.Details() {
			switch d := d.(type) {
			case *rocketryv1.ErrorDetail:
				o.Code, o.Reason = fromV1(d)
				o.WireCode = int32(o.Code)
			case *errdetails.RetryInfo:
				if d.GetRetryDelay() != nil {
					o.Hint = max(d.GetRetryDelay().AsDuration(), 0)
				}
			}
		}
	}
	switch gc := s.Code(); {
	case o.Code == brokercode.TooManyRequests:
		o.Kind = outcome.Throttled
	case gc == codes.ResourceExhausted && tooLarge(s.Message()):
		o.Kind, o.Code, o.Hint = outcome.Permanent, brokercode.MessageTooLarge, 0
	case gc == codes.ResourceExhausted:
		o.Kind = outcome.Throttled
		o.Code = brokercode.TooManyRequests
	case o.Code == brokercode.InternalError || o.Code == brokercode.Unavailable:
		o.Kind = outcome.FailedNotStored
	case gc == codes.Unavailable, gc == codes.Internal, gc == codes.Unknown, gc == codes.Aborted,
		gc == codes.DeadlineExceeded, gc == codes.Canceled:
		o.Kind = outcome.FailedUnknown
	default:
		o.Kind = outcome.Permanent
	}
	return o
}

// fromV1 reads rocketry.v1's ErrorDetail into the project's code and
// reason: rocketry.v1's numbers are brokercode's (its tests pin them), so
// the mapping is the identity, and a code outside brokercode's table keeps
// its number.
func fromV1(d *rocketryv1.ErrorDetail) (brokercode.Code, brokercode.Reason) {
	return brokercode.Code(d.GetCode()), brokercode.Reason(d.GetReason())
}

// tooLarge reports whether a RESOURCE_EXHAUSTED message is gRPC's own
// refusal of a message over a size limit, on either side.
func tooLarge(msg string) bool {
	return strings.Contains(msg, "message larger than max")
}
