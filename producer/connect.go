package producer

import (
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/producer/internal/send"
	"github.com/rocketry-go/rocketry/producer/internal/wire"
	wirermq "github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq"
)

// This file is about reaching a broker: how an endpoint is dialled, how an
// attempt that could not reach its broker is named (ConnectError; the
// reading itself, wire.NotSent, is in producer/internal/wire, and
// publicError here gives its errors their public names), and whether a
// retry waits for the connection (WithWaitForReady).
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
func (e *ConnectError) Error() string { return wire.ConnectMessage(e.Endpoint, e.Reason, e.Err) }

// Unwrap returns Reason and Err.
func (e *ConnectError) Unwrap() []error { return []error{e.Reason, e.Err} }

// GRPCStatus is Err's status, so that status.Code reads UNAVAILABLE.
func (e *ConnectError) GRPCStatus() *status.Status {
	s, _ := status.FromError(e.Err)
	return s
}

// publicError is err as the public API gives it: the one mapping of the
// errors of the wire (producer/internal/wire and each protocol's package,
// which know no public name) to this package's, made where an error
// leaves for the caller (a SendError's Cause, an Event's Err, a
// constructor's, Resend's, a Transaction's or Recall's error). A
// *wire.ConnectError becomes a *ConnectError with the public Reason, a
// *wire.TargetError a bad target's error (ErrInvalidTarget), a
// *wirermq.StatusError a *RocketMQStatusError, a *wirermq.AuthError an
// *AuthError, and an error wrapping
// another wire sentinel (ErrNoEndpoints, ErrClosed, ...) or one of those
// errors is wrapped so that errors.Is matches the public sentinel and
// errors.As finds the public error, with the same text; any other error
// is returned as it is.
func publicError(err error) error {
	if pe := wrongProtocol(err); pe != nil {
		return pe
	}
	switch e := err.(type) {
	case nil:
		return nil
	case *wire.ConnectError:
		return publicConnectError(e)
	case *wire.TargetError:
		return &targetError{msg: e.Msg}
	case *wirermq.StatusError:
		return &RocketMQStatusError{Code: e.Code, Message: e.Message}
	case *wirermq.AuthError:
		return publicAuthError(e)
	}
	for _, s := range sentinels {
		if errors.Is(err, s.wire) {
			return &wireError{err}
		}
	}
	var ce *wire.ConnectError
	var se *wirermq.StatusError
	var ae *wirermq.AuthError
	if errors.As(err, &ce) || errors.As(err, &se) || errors.As(err, &ae) {
		return &wireError{err}
	}
	return err
}

func publicAuthError(e *wirermq.AuthError) *AuthError {
	return &AuthError{AccessKey: e.AccessKey, Endpoint: e.Endpoint, Denied: e.Denied, Err: publicError(e.Err)}
}

func publicConnectError(e *wire.ConnectError) *ConnectError {
	return &ConnectError{Endpoint: e.Endpoint, Reason: publicSentinel(e.Reason), Err: e.Err}
}

// sentinels pairs each wire sentinel with this package's.
var sentinels = [...]struct{ wire, public error }{
	{wire.ErrConnectionRefused, ErrConnectionRefused},
	{wire.ErrUnknownHost, ErrUnknownHost},
	{wire.ErrNotGRPC, ErrNotGRPC},
	{wire.ErrNoEndpoints, ErrNoEndpoints},
	{wire.ErrClosed, ErrClosed},
	{wire.ErrInvalidTarget, ErrInvalidTarget},
	{wire.ErrInvalidMessage, ErrInvalidMessage},
	{wire.ErrAttemptsExhausted, ErrAttemptsExhausted},
	{wirermq.ErrTransactionNotFound, ErrTransactionNotFound},
	{wirermq.ErrRecallTooLate, ErrRecallTooLate},
	{wirermq.ErrRecallHandle, ErrRecallHandle},
}

// publicSentinel is a wire sentinel as this package's; any other error as
// it is.
func publicSentinel(err error) error {
	for _, s := range sentinels {
		if err == s.wire {
			return s.public
		}
	}
	return err
}

// wireError is an error of the wire that wraps one of its sentinels or
// errors, as publicError gives it: the same text and chain; errors.Is
// matches the public sentinel of each wire sentinel in the chain, and
// errors.As finds a *ConnectError or a *RocketMQStatusError where the
// chain has the wire's.
type wireError struct{ err error }

func (e *wireError) Error() string { return e.err.Error() }
func (e *wireError) Unwrap() error { return e.err }

// Is reports whether target is the public sentinel of a wire sentinel
// that the error wraps.
func (e *wireError) Is(target error) bool {
	if target == ErrUnauthorized || target == ErrForbidden {
		var ae *wirermq.AuthError
		return errors.As(e.err, &ae) && publicAuthError(ae).Is(target)
	}
	for _, s := range sentinels {
		if target == s.public {
			return errors.Is(e.err, s.wire)
		}
	}
	return false
}

// As sets target to the public error of a wire error in the chain: a
// *ConnectError, a *RocketMQStatusError, or an error that reads its own
// outcome (errOutcome).
func (e *wireError) As(target any) bool {
	switch t := target.(type) {
	case **ConnectError:
		var ce *wire.ConnectError
		if errors.As(e.err, &ce) {
			*t = publicConnectError(ce)
			return true
		}
	case **AuthError:
		var ae *wirermq.AuthError
		if errors.As(e.err, &ae) {
			*t = publicAuthError(ae)
			return true
		}
	case **RocketMQStatusError:
		if se := e.status(); se != nil {
			*t = se
			return true
		}
	case *interface{ outcome() Outcome }:
		if se := e.status(); se != nil {
			*t = se
			return true
		}
	}
	return false
}

// status is the public error of the chain's *wirermq.StatusError; nil
// when it has none.
func (e *wireError) status() *RocketMQStatusError {
	var se *wirermq.StatusError
	if errors.As(e.err, &se) {
		return &RocketMQStatusError{Code: se.Code, Message: se.Message}
	}
	return nil
}
