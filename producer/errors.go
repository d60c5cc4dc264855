package producer

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/rocketry-go/rocketry/brokercode"
	"github.com/rocketry-go/rocketry/producer/internal/send"
	"github.com/rocketry-go/rocketry/senderr"
)

// ErrInvalidMessage is returned, wrapped with what is wrong, when a message
// fails validation (nil, empty topic, body over the limit); no attempt is
// made. Such a message is the caller's bug: it is not handed to the
// dead-letter sink.
var ErrInvalidMessage = senderr.ErrInvalidMessage

// ErrClosed is returned when a send is started on a closed Producer, and is
// wrapped (in a *SendError) by the error of a send that Close cancelled
// because Close's context ended first.
var ErrClosed = senderr.ErrClosed

// ErrBufferFull is returned by TrySendAsync when MaxInFlight async sends are
// already in flight.
var ErrBufferFull = errors.New("producer: too many sends in flight")

// ErrAttemptsExhausted is wrapped by a *SendError when every attempt allowed
// (MaxAttempts, counting the first) was made, or the schedule allowed no
// further retry, and the last one failed.
var ErrAttemptsExhausted = senderr.ErrAttemptsExhausted

// ErrDeadlineTooShort is wrapped by a *SendError when the wait before the next
// attempt would end after the caller's deadline: the send fails at once
// instead of sleeping past it.
var ErrDeadlineTooShort = errors.New("producer: deadline too short for the next attempt")

// ErrNotRetryable is wrapped by a *SendError when an attempt failed in a way
// that is never retried: a 4xx answer, or an unknown outcome (timeout, lost
// connection, 5xx) of a transactional message.
var ErrNotRetryable = errors.New("producer: not retryable")

// ErrRetryBudget is wrapped by a *SendError when a retry was refused because
// the retry budget (WithRetryBudget) is spent.
var ErrRetryBudget = errors.New("producer: retry budget spent")

// ErrGroupFailed is wrapped by the *SendError of a FIFO message
// (Message.MessageGroup) that was waiting behind a message of its group
// that failed for good: it fails without an attempt, so that its group is
// not stored with a gap, and its Cause wraps that first failure (a
// *SendError naming its message). Sends of the group made after the first
// failure was reported go on (see fifo.go).
var ErrGroupFailed = errors.New("producer: an earlier message of its group failed")

// ErrInvalidTarget is returned by New, wrapped with what is wrong, when its
// target is empty, is not a list of host:port, names a scheme no resolver
// is registered for, or has a scheme where the protocol takes none
// (RocketMQ5).
var ErrInvalidTarget = senderr.ErrInvalidTarget

// ErrConnectionRefused is the Reason of a *ConnectError (an attempt's
// Cause) when the broker's host refused the connection: nothing listens on
// its port.
var ErrConnectionRefused = senderr.ErrConnectionRefused

// ErrUnknownHost is the Reason of a *ConnectError when the broker's host
// name does not resolve.
var ErrUnknownHost = senderr.ErrUnknownHost

// ErrNotGRPC is the Reason of a *ConnectError when something answered on
// the broker's port but not as a gRPC server (an HTTP/1 server, say).
var ErrNotGRPC = senderr.ErrNotGRPC

// ErrNoEndpoints is wrapped by an attempt's Cause when a target with a
// scheme has no endpoint to send to: its resolver gave no address, failed,
// or has not answered within the attempt. The message is known not stored.
var ErrNoEndpoints = senderr.ErrNoEndpoints

// SendError is the error of a send that made at least one attempt (or was
// cancelled before it could) and did not store its message. errors.Is works
// both with the reason the send ended (ErrAttemptsExhausted,
// ErrDeadlineTooShort, ErrNotRetryable, ErrRetryBudget, ErrClosed, or the
// caller's context error) and with the last attempt's error, Cause.
type SendError struct {
	// MessageID is the message's ID; empty for a call through the
	// interceptor that carried no rocketry message.
	MessageID string
	// Attempts is the number of attempts made, counting the first.
	Attempts int
	// Code is the broker code of the last answer, brokercode.Unspecified when it
	// carried none (a lost connection, a timeout).
	Code brokercode.Code
	// WireCode is the last answer's code as its protocol spelt it (the
	// rocketry.v1 code, or the apache.rocketmq.v2 status code such as
	// 42900); 0 when it carried none.
	WireCode int32
	// Reason is the last throttle reason, if any attempt was throttled.
	Reason brokercode.Reason
	// Last is the kind of the last attempt's outcome (0 when no attempt
	// was made).
	Last OutcomeKind
	// DeadLettered is true when the message was handed to the dead-letter
	// sink (WithDeadLetterSink, WithFallback) and kept. The one field
	// written after the error is made: by the hand-off, before the send
	// returns.
	DeadLettered bool
	// MaybeStoredAt names the endpoint (host:port, or a RocketMQ 5 broker's
	// name and endpoints, "broker-a@host:port[;host:port]") of the last
	// attempt whose outcome was unknown: the message may be stored there,
	// and a replay sends it there (Producer.Resend). Empty when every
	// attempt's outcome was known.
	MaybeStoredAt string
	// Cause is the last attempt's error (nil when no attempt was made).
	Cause error

	kind   error // why the send ended: one of the sentinels or a context error
	ctxErr error // the caller's context error, when the send stopped because of it
}

// One writer: a SendError is made by newSendError alone, from the state of
// the send that failed (the executor's, or a send stopped before any
// attempt), and none of its fields changes after, but DeadLettered, which
// the dead-letter hand-off (deadletter.go) sets before the send returns it.

// newSendError is the failure f of a send (the executor's, or of a send
// stopped before any attempt): why it ended, its attempts, the last
// attempt's outcome (zero when none was made), the last throttle's reason
// and where the message may be stored.
func newSendError(f *send.Failure) *SendError {
	return &SendError{
		MessageID:     f.ID,
		Attempts:      f.Attempts,
		Code:          f.Last.Code,
		WireCode:      f.Last.WireCode,
		Reason:        f.Reason,
		Cause:         publicError(f.Last.Err),
		Last:          OutcomeKind(f.Last.Kind),
		MaybeStoredAt: f.MaybeAt,
		kind:          endError(f.End, f.Cause),
		ctxErr:        f.CtxErr,
	}
}

// endError is the one reading of why a send ended (send.End) as this
// package's sentinel errors; for a send its context stopped, the
// context's cause.
func endError(end send.End, cause error) error {
	switch end {
	case send.EndAttemptsExhausted:
		return ErrAttemptsExhausted
	case send.EndDeadlineTooShort:
		return ErrDeadlineTooShort
	case send.EndNotRetryable:
		return ErrNotRetryable
	case send.EndRetryBudget:
		return ErrRetryBudget
	case send.EndClosed:
		return ErrClosed
	case send.EndGroupFailed:
		return ErrGroupFailed
	case send.EndContext:
		return cause
	}
	return nil
}

// runSend runs x to its end: nil when its message is stored, else the
// send's *SendError.
func runSend(ctx context.Context, x *send.Executor) *SendError {
	if f, failed := x.Run(ctx); failed {
		return newSendError(&f)
	}
	return nil
}

// Error says why the send ended, after how many attempts, and the cause.
func (e *SendError) Error() string {
	var b strings.Builder
	b.WriteString("producer: send")
	if e.MessageID != "" {
		b.WriteString(" of message ")
		b.WriteString(strconv.Quote(e.MessageID))
	}
	b.WriteString(" failed after ")
	b.WriteString(strconv.Itoa(e.Attempts))
	if e.Attempts == 1 {
		b.WriteString(" attempt")
	} else {
		b.WriteString(" attempts")
	}
	if e.kind != nil {
		b.WriteString(" (")
		b.WriteString(strings.TrimPrefix(e.kind.Error(), "producer: "))
		b.WriteString(")")
	}
	if e.DeadLettered {
		b.WriteString(", handed to the dead-letter sink")
	}
	if e.Cause != nil {
		b.WriteString(": ")
		b.WriteString(e.Cause.Error())
	}
	return b.String()
}

// Unwrap returns Cause.
func (e *SendError) Unwrap() error { return e.Cause }

// Is reports whether target is why the send ended (one of the sentinels, or
// the caller's context error when it stopped the send).
func (e *SendError) Is(target error) bool {
	if target == nil {
		return false
	}
	return target == e.kind || target == e.ctxErr
}

// OptionError is returned by New, NewFromConn, NewUnaryClientInterceptor and
// calls through an interceptor when an option is invalid or does not apply
// where it was given. It names the option, so a program (the CLI) can tell
// which of its inputs was wrong without matching strings.
type OptionError struct {
	// Option is the option's name, such as "WithMaxAttempts".
	Option string
	// Value is the option's argument as given, formatted with %v; empty
	// for an option given in the wrong place.
	Value string
	// Where is the constructor or call the option was given to.
	Where string
	// Reason says what is wrong, such as "must be >= 1".
	Reason string
}

func (e *OptionError) Error() string {
	if e.Value == "" && e.Where != "" {
		return "producer: " + e.Option + " " + e.Reason + " " + e.Where
	}
	return "producer: " + e.Option + "(" + e.Value + "): " + e.Reason
}

// RocketMQStatusError is returned, as a *SendError's Cause, when an
// apache.rocketmq.v2 answer's status is not OK. errors.As finds it in a
// *SendError's Cause; IsThrottled and CodeOf read it. It is
// senderr.StatusError, the type RocketMQ 5's transport returns; its fields
// are Code, the v2 status code, such as 42900 (TOO_MANY_REQUESTS), and
// Message, the status message as the server wrote it.
type RocketMQStatusError = senderr.StatusError

// ErrUnauthorized is matched (errors.Is) by the error of New or of a send
// when a RocketMQ 5 server refused the producer's credentials or their
// permission: gRPC UNAUTHENTICATED or PERMISSION_DENIED, or the body status
// 40100 UNAUTHORIZED or 40300 FORBIDDEN. Such a refusal is final: New
// returns at the first one (it does not wait out its timeout, nor open its
// Telemetry stream again), and a send fails after that one attempt
// (ErrNotRetryable), as every retry would be refused the same. The error
// is an *AuthError, which names the access key (never the secret);
// status.Code reads its gRPC code and errors.As finds the server's
// *RocketMQStatusError when it answered with one.
var ErrUnauthorized = senderr.ErrUnauthorized

// ErrForbidden is matched, besides ErrUnauthorized, by the error of a
// refused permission: gRPC PERMISSION_DENIED or 40300 FORBIDDEN. An Apache
// RocketMQ proxy answers refused credentials and a refused permission alike
// (40100 UNAUTHORIZED), so against it only ErrUnauthorized is matched, and
// the status message says which.
var ErrForbidden = senderr.ErrForbidden

// AuthError is the error of New, or a send's Cause, when a RocketMQ 5
// server refused the producer's credentials or their permission (see
// ErrUnauthorized). errors.Is matches ErrUnauthorized, and ErrForbidden
// when Denied; Unwrap gives Err (a *RocketMQStatusError, or the server's
// gRPC status error); status.Code reads UNAUTHENTICATED (40100) or
// PERMISSION_DENIED (40300), or the server's own gRPC status. It is
// senderr.AuthError; its AccessKey names the access key (never the
// secret), its Endpoint the server that refused.
type AuthError = senderr.AuthError
