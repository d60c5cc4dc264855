package producer

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rocketry-go/rocketry/producer/internal/send"
	"github.com/rocketry-go/rocketry/senderr"
)

// This file is about reaching a broker: how an endpoint is dialled, how an
// attempt that could not reach its broker is named (ConnectError, which is
// senderr's; the reading itself, wire.NotSent, is in
// producer/internal/wire), and whether a retry waits for the connection
// (WithWaitForReady).
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
// its timeout). It is senderr.ConnectError, the type the producer's
// transports return.
type ConnectError = senderr.ConnectError

// explainProtocol is err where it leaves for the caller (a SendError's
// Cause, an Event's Err, a constructor's, Resend's, a Transaction's or
// Recall's error): an UNIMPLEMENTED answer for the other protocol's
// service is explained (wrongProtocol); any other error is returned as it
// is, since the transports' errors are the public ones (package senderr,
// whose names this package re-exports).
func explainProtocol(err error) error {
	if pe := wrongProtocol(err); pe != nil {
		return pe
	}
	return err
}
