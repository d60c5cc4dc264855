package senderr

import (
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ConnectError is the error of an attempt whose request never left the
// client because its broker could not be reached: the message is known not
// stored. errors.Is matches Reason (ErrConnectionRefused, ErrUnknownHost,
// ErrNotGRPC) and errors.As or status.Code read Err, gRPC's UNAVAILABLE
// (or DEADLINE_EXCEEDED when the attempt waited for the connection until
// its timeout).
type ConnectError struct {
	// Endpoint is the broker's address, as the producer dialled it.
	Endpoint string
	// Reason is ErrConnectionRefused, ErrUnknownHost or ErrNotGRPC.
	Reason error
	// Err is the attempt's gRPC error, with gRPC's own words.
	Err error
}

// Error says which broker, why, and what gRPC said, on one line.
func (e *ConnectError) Error() string {
	detail, waited := "", false
	if s, ok := status.FromError(e.Err); ok {
		detail, waited = s.Message(), s.Code() == codes.DeadlineExceeded
	} else if e.Err != nil {
		detail = e.Err.Error()
	}
	detail = strings.TrimPrefix(detail, "latest balancer error: ")
	detail = strings.TrimPrefix(detail, `connection error: desc = "`)
	detail = strings.TrimSuffix(detail, `"`)
	detail = strings.TrimPrefix(detail, "transport: Error while dialing: ")
	msg := "producer: broker " + e.Endpoint + " unreachable"
	if waited {
		msg += " until the attempt's deadline"
	}
	msg += ": " + strings.TrimPrefix(e.Reason.Error(), "producer: ")
	if detail != "" {
		msg += " (" + detail + ")"
	}
	return msg
}

// Unwrap returns Reason and Err.
func (e *ConnectError) Unwrap() []error { return []error{e.Reason, e.Err} }

// GRPCStatus is Err's status, so that status.Code reads UNAVAILABLE.
func (e *ConnectError) GRPCStatus() *status.Status {
	s, _ := status.FromError(e.Err)
	return s
}
