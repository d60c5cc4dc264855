package producer

import (
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// This file is about reaching a broker: how an endpoint is dialled, how an
// attempt that could not reach its broker is named (ConnectError), and
// whether a retry waits for the connection (WithWaitForReady).
//
// Why an unreachable broker used to cost the attempt timeout: the first
// attempt fails fast (gRPC fails a call at once while its channel is in
// TRANSIENT_FAILURE), but its retry went to the same endpoint with gRPC's
// wait-for-ready, which holds the call until the channel is READY; the
// channel then waits out its connection backoff (1 s, x1.6), so each retry
// ran into its attempt timeout, and the error said "attempt timeout
// exceeded". Now a retry waits for its connection only when it may find
// its message there (after an unknown outcome) or when WithWaitForReady
// asks; the others fail as fast as gRPC does, naming the cause.

// passthrough is the gRPC target of a host:port endpoint: the address is
// handed to the dialer as it is, so that a host that does not resolve
// fails the dial with "no such host" (the DNS resolver would say only
// "produced zero addresses"); the dialer resolves the name on every
// connection.
func passthrough(addr string) string { return "passthrough:///" + addr }

// v1DialOptions are the dial options of a rocketry.v1 connection: insecure
// credentials, then WithDialOptions (which may replace them).
func (c *config) v1DialOptions() []grpc.DialOption {
	return append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, c.dialOpts...)
}

// WithWaitForReady sets whether a retry to a broker that could not be
// reached waits for its connection (gRPC wait-for-ready) within its attempt
// timeout, overriding the default of false. By default an attempt whose
// request never left the client (connection refused, unknown host, not a
// gRPC server: a *ConnectError) is known not stored, and its retry goes at
// once to the next endpoint, or fails as fast to the same one when there
// is only one: the attempts are spent in milliseconds and the error names
// the cause. Set it when a single broker may be briefly away (a restart)
// and sends should wait for it instead; each such retry may then take the
// whole attempt timeout. A retry after an unknown outcome always waits for
// its connection, since its broker may hold the message. Applies
// everywhere.
func WithWaitForReady(on bool) Option {
	return option{"WithWaitForReady", scopeAll, func(c *config) error {
		c.waitForReady = on
		return nil
	}}
}

// ConnectError is the Cause of an attempt whose request never left the
// client because its broker could not be reached: the message is known not
// stored. errors.Is matches Reason (ErrConnectionRefused, ErrUnknownHost,
// ErrNotGRPC) and errors.As or status.Code read Err, gRPC's UNAVAILABLE.
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
	detail := ""
	if s, ok := status.FromError(e.Err); ok {
		detail = s.Message()
	} else if e.Err != nil {
		detail = e.Err.Error()
	}
	detail = strings.TrimPrefix(detail, `connection error: desc = "`)
	detail = strings.TrimSuffix(detail, `"`)
	detail = strings.TrimPrefix(detail, "transport: Error while dialing: ")
	msg := "producer: broker " + e.Endpoint + " unreachable: " + strings.TrimPrefix(e.Reason.Error(), "producer: ")
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

// unreachable reads the outcome of an attempt whose request never left the
// client: when gRPC's error says that the broker at endpoint could not be
// reached, the outcome is FailedNotStored with a *ConnectError naming the
// cause; otherwise o is returned as it is.
func unreachable(o Outcome, endpoint string) Outcome {
	s, ok := status.FromError(o.Err)
	if !ok || s.Code() != codes.Unavailable {
		return o
	}
	reason := connectReason(s.Message())
	if reason == nil {
		return o
	}
	o.Kind = FailedNotStored
	o.Err = &ConnectError{Endpoint: endpoint, Reason: reason, Err: o.Err}
	return o
}

// connectReason reads why a connection failed from gRPC's words for it,
// which carry the dialer's and HTTP/2's error texts; nil when they say
// something else.
func connectReason(msg string) error {
	switch {
	case strings.Contains(msg, "connection refused"), strings.Contains(msg, "actively refused"):
		return ErrConnectionRefused
	case strings.Contains(msg, "no such host"):
		return ErrUnknownHost
	case strings.Contains(msg, "error reading server preface"), strings.Contains(msg, "looked like an HTTP/1.1 header"):
		return ErrNotGRPC
	}
	return nil
}
