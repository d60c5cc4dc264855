// Package wire is what the producer's wire protocols speak in common,
// below the public API and above each protocol's package: the reading of
// an attempt that never left the client (NotSent, with its
// senderr.ConnectError), a constructor's error for a bad target
// (TargetError), each protocol's side of the batcher (FailAll, CutShort,
// BatchCodec), the interface of a transport (Transport, over the public
// message.Message and message.Receipt, with a resend's send.Pin), and what
// only RocketMQ 5 has, which the producer asserts its transport for
// (Transactions, Half).
//
// It knows no protocol. Its errors are the public ones of package senderr
// (the sentinels, ConnectError), and its messages, receipts and outcomes
// those of the leaf packages message and outcome, which the producer
// names as they are (aliases): nothing is mapped field for field.
package wire

import (
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/senderr"
)

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
func NotSent(o outcome.Outcome, err error, pr *peer.Peer, endpoint string) (outcome.Outcome, bool) {
	if err == nil || pr.Addr != nil {
		return o, false
	}
	return Unreachable(o, endpoint), true
}

// Unreachable reads the outcome of an attempt whose request never left the
// client: when gRPC's error (UNAVAILABLE, or DEADLINE_EXCEEDED after
// waiting for the connection, with the connection's last error) says that
// the broker at endpoint could not be reached, the outcome is
// FailedNotStored with a *senderr.ConnectError naming the cause; otherwise o is
// returned as it is.
func Unreachable(o outcome.Outcome, endpoint string) outcome.Outcome {
	s, ok := status.FromError(o.Err)
	if !ok || (s.Code() != codes.Unavailable && s.Code() != codes.DeadlineExceeded) {
		return o
	}
	reason := connectReason(s.Message())
	if reason == nil {
		return o
	}
	o.Kind = outcome.FailedNotStored
	o.Err = &senderr.ConnectError{Endpoint: endpoint, Reason: reason, Err: o.Err}
	return o
}

// connectReason reads why a connection failed from gRPC's words for it,
// which carry the dialer's and HTTP/2's error texts; nil when they say
// something else.
func connectReason(msg string) error {
	switch {
	case strings.Contains(msg, "connection refused"), strings.Contains(msg, "actively refused"):
		return senderr.ErrConnectionRefused
	case strings.Contains(msg, "no such host"):
		return senderr.ErrUnknownHost
	case strings.Contains(msg, "error reading server preface"), strings.Contains(msg, "looked like an HTTP/1.1 header"):
		return senderr.ErrNotGRPC
	}
	return nil
}
