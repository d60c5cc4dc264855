package broker

import (
	"errors"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

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
)

// grpcCodes maps a broker code to its gRPC code (DESIGN.md).
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

func badRequest(msg string) error {
	return statusError(rocketryv1.Code_CODE_BAD_REQUEST, 0, 0, "broker: "+msg)
}

type protoMessage = protoadapt.MessageV1
