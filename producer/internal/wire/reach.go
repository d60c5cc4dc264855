// Package wire is what the producer's wire protocols speak in common,
// below the public API and above each protocol's package: the reading of
// an attempt that never left the client (NotSent, with its ConnectError),
// the errors a protocol returns that the public API names (ErrNoEndpoints,
// ErrClosed, ...), each protocol's side of the batcher (FailAll, CutShort,
// BatchCodec), the message, receipt and pin a transport takes and gives
// (Message, Receipt, Pin, Transport), and what only RocketMQ 5 has, which
// the producer asserts its transport for (Transactions, Half).
//
// It knows no protocol and no public name: package producer maps its
// errors to the public ones in one function (producer's publicError), and
// its messages and receipts field for field.
package wire

import (
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/producer/internal/send"
)

// The neutral sentinels: each is one of the producer's public errors (the
// same text), which producer's publicError substitutes for it.
var (
	// ErrConnectionRefused is producer.ErrConnectionRefused.
	ErrConnectionRefused = errors.New("producer: connection refused")
	// ErrUnknownHost is producer.ErrUnknownHost.
	ErrUnknownHost = errors.New("producer: unknown host")
	// ErrNotGRPC is producer.ErrNotGRPC.
	ErrNotGRPC = errors.New("producer: not a gRPC server")
)

// ConnectError is producer.ConnectError below the public API: an attempt
// whose request never left the client because its broker could not be
// reached. Reason is one of ErrConnectionRefused, ErrUnknownHost,
// ErrNotGRPC.
type ConnectError struct {
	Endpoint string
	Reason   error
	Err      error
}

// Error is ConnectMessage's.
func (e *ConnectError) Error() string { return ConnectMessage(e.Endpoint, e.Reason, e.Err) }

// Unwrap returns Reason and Err.
func (e *ConnectError) Unwrap() []error { return []error{e.Reason, e.Err} }

// GRPCStatus is Err's status, so that status.Code reads UNAVAILABLE.
func (e *ConnectError) GRPCStatus() *status.Status {
	s, _ := status.FromError(e.Err)
	return s
}

// ConnectMessage is the text of a ConnectError (and of the public one):
// which broker, why, and what gRPC said, on one line.
func ConnectMessage(endpoint string, reason, err error) string {
	detail, waited := "", false
	if s, ok := status.FromError(err); ok {
		detail, waited = s.Message(), s.Code() == codes.DeadlineExceeded
	} else if err != nil {
		detail = err.Error()
	}
	detail = strings.TrimPrefix(detail, "latest balancer error: ")
	detail = strings.TrimPrefix(detail, `connection error: desc = "`)
	detail = strings.TrimSuffix(detail, `"`)
	detail = strings.TrimPrefix(detail, "transport: Error while dialing: ")
	msg := "producer: broker " + endpoint + " unreachable"
	if waited {
		msg += " until the attempt's deadline"
	}
	msg += ": " + strings.TrimPrefix(reason.Error(), "producer: ")
	if detail != "" {
		msg += " (" + detail + ")"
	}
	return msg
}

// Passthrough is the gRPC target of a host:port endpoint: the address is
// handed to the dialer as it is, so that a host that does not resolve
// fails the dial with "no such host" (the DNS resolver would say only
// "produced zero addresses"); the dialer resolves the name on every
// connection.
func Passthrough(addr string) string { return "passthrough:///" + addr }

// NotSent is the one reading of "the request never left the client" for
// every call that sends (alone, in a batch, through the interceptor; both
// protocols): a call that failed before gRPC gave it a peer. It returns o,
// read as Unreachable says when the request never left for the broker at
// endpoint, and whether it never left (the message is known not stored).
func NotSent(o send.Outcome, err error, pr *peer.Peer, endpoint string) (send.Outcome, bool) {
	if err == nil || pr.Addr != nil {
		return o, false
	}
	return Unreachable(o, endpoint), true
}

// Unreachable reads the outcome of an attempt whose request never left the
// client: when gRPC's error (UNAVAILABLE, or DEADLINE_EXCEEDED after
// waiting for the connection, with the connection's last error) says that
// the broker at endpoint could not be reached, the outcome is
// FailedNotStored with a *ConnectError naming the cause; otherwise o is
// returned as it is.
func Unreachable(o send.Outcome, endpoint string) send.Outcome {
	s, ok := status.FromError(o.Err)
	if !ok || (s.Code() != codes.Unavailable && s.Code() != codes.DeadlineExceeded) {
		return o
	}
	reason := connectReason(s.Message())
	if reason == nil {
		return o
	}
	o.Kind = send.FailedNotStored
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
