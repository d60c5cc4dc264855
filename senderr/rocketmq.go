package senderr

import (
	"fmt"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
)

// StatusError is an apache.rocketmq.v2 (RocketMQ 5) answer whose status is
// not OK: the error of such an attempt (producer.RocketMQStatusError).
// errors.As finds it in a send's error; producer.IsThrottled and
// producer.CodeOf read it.
type StatusError struct {
	// Code is the v2 status code, such as 42900 (TOO_MANY_REQUESTS).
	Code int32
	// Message is the status message, as the server wrote it.
	Message string
}

// Error gives the code, its name and the message.
func (e *StatusError) Error() string {
	s := fmt.Sprintf("producer: rocketmq status %d %s", e.Code, rocketmqv2.Code(e.Code))
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// AuthError is the error of a producer's start, or of an attempt, when a
// RocketMQ 5 server refused the producer's credentials or their
// permission. errors.Is matches ErrUnauthorized, and ErrForbidden when
// Denied; Unwrap gives Err; status.Code reads UNAUTHENTICATED (40100) or
// PERMISSION_DENIED (40300), or the server's own gRPC status.
type AuthError struct {
	// AccessKey is the access key the refused call was signed with; empty
	// when the producer has no credentials. The secret key is never in the
	// error.
	AccessKey string
	// Endpoint is the server that refused, host:port.
	Endpoint string
	// Denied is true for a refused permission (PERMISSION_DENIED, 40300
	// FORBIDDEN), false for refused credentials (UNAUTHENTICATED, 40100
	// UNAUTHORIZED).
	Denied bool
	// Err is the server's answer: a *StatusError, or its gRPC status
	// error.
	Err error
}

// Error names the access key, the server and its answer.
func (e *AuthError) Error() string {
	s := "producer: rocketmq: "
	if e.AccessKey == "" {
		s += "calls without credentials (no WithCredentials)"
	} else {
		s += "access key " + strconv.Quote(e.AccessKey)
	}
	s += " refused"
	if e.Endpoint != "" {
		s += " by " + e.Endpoint
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns Err.
func (e *AuthError) Unwrap() error { return e.Err }

// Is reports whether target is ErrUnauthorized, or ErrForbidden for a
// refused permission.
func (e *AuthError) Is(target error) bool {
	return target == ErrUnauthorized || (e.Denied && target == ErrForbidden)
}

// GRPCStatus is the refusal's gRPC status: the server's own, or
// UNAUTHENTICATED for 40100 and PERMISSION_DENIED for 40300, with the
// error's text.
func (e *AuthError) GRPCStatus() *status.Status {
	if s, ok := status.FromError(e.Err); ok && e.Err != nil {
		return s
	}
	if e.Denied {
		return status.New(codes.PermissionDenied, e.Error())
	}
	return status.New(codes.Unauthenticated, e.Error())
}
