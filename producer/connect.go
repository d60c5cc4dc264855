package producer

import (
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/producer/internal/send"
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
// exceeded", for every message. Now a retry after a request that never
// left waits for its connection only for a broker reached lately (within
// send.ReachWindow: a restart, likely over soon); a broker never reached (a
// wrong address, nothing listening) or not reached for that long fails as
// fast as gRPC does, naming the cause. A retry after an unknown outcome
// always waits: its broker may hold the message.

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

// WithWaitForReady sets whether a retry to a broker whose request never
// left the client (connection refused, unknown host, not a gRPC server: a
// *ConnectError; the message is known not stored) waits for its connection
// (gRPC wait-for-ready) within its attempt timeout. Such a retry goes to
// the next endpoint where there is one; this is about a retry that stays
// on the same broker, as with a single endpoint.
//
// By default it waits only for a broker reached lately: one that a request
// reached within the last 10 s. So a broker that restarts is waited for,
// and a broker never reached (a wrong address, nothing listening), or gone
// for longer, costs milliseconds, not an attempt timeout per attempt.
// true waits every time (each such retry may take the whole attempt
// timeout); false never waits. A retry after an unknown outcome waits for
// its connection either way, since its broker may hold the message.
// Through the interceptor, which keeps no state per broker, the default
// waits as true does. Applies everywhere.
func WithWaitForReady(on bool) Option {
	return option{"WithWaitForReady", scopeAll, func(c *config) error {
		c.WaitFor = send.WaitNever
		if on {
			c.WaitFor = send.WaitAlways
		}
		return nil
	}}
}

// ConnectError is the Cause of an attempt whose request never left the
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

// notSent is the one reading of "the request never left the client" for
// every call that sends (alone, in a batch, through the interceptor): a
// call that failed before gRPC gave it a peer. It returns o, read as
// unreachable says when the request never left for the broker at
// endpoint, and whether it never left (the message is known not stored).
func notSent(o Outcome, err error, pr *peer.Peer, endpoint string) (Outcome, bool) {
	if err == nil || pr.Addr != nil {
		return o, false
	}
	return unreachable(o, endpoint), true
}

// unreachable reads the outcome of an attempt whose request never left the
// client: when gRPC's error (UNAVAILABLE, or DEADLINE_EXCEEDED after
// waiting for the connection, with the connection's last error) says that
// the broker at endpoint could not be reached, the outcome is
// FailedNotStored with a *ConnectError naming the cause; otherwise o is
// returned as it is.
func unreachable(o Outcome, endpoint string) Outcome {
	s, ok := status.FromError(o.Err)
	if !ok || (s.Code() != codes.Unavailable && s.Code() != codes.DeadlineExceeded) {
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
