package producer

import (
	"context"
	"errors"

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
var ErrDeadlineTooShort = senderr.ErrDeadlineTooShort

// ErrNotRetryable is wrapped by a *SendError when an attempt failed in a way
// that is never retried: a 4xx answer, or an unknown outcome (timeout, lost
// connection, 5xx) of a transactional message.
var ErrNotRetryable = senderr.ErrNotRetryable

// ErrRetryBudget is wrapped by a *SendError when a retry was refused because
// the retry budget (WithRetryBudget) is spent.
var ErrRetryBudget = senderr.ErrRetryBudget

// ErrGroupFailed is wrapped by the *SendError of a FIFO message
// (Message.MessageGroup) that was waiting behind a message of its group
// that failed for good: it fails without an attempt, so that its group is
// not stored with a gap, and its Cause wraps that first failure (a
// *SendError naming its message). Sends of the group made after the first
// failure was reported go on (see fifo.go).
var ErrGroupFailed = senderr.ErrGroupFailed

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
// ErrDeadlineTooShort, ErrNotRetryable, ErrRetryBudget, ErrClosed,
// ErrGroupFailed, or the caller's context error) and with the last
// attempt's error, Cause. It is senderr.SendError, the error the executor
// makes; see there for its fields.
type SendError = senderr.SendError

// sendError is f, the failure of a send (the executor's, or of a send
// stopped before any attempt), as the public API gives it: its Cause read
// through explainProtocol. The one step of the producer's own; the
// dead-letter hand-off (deadletter.go) sets DeadLettered after.
func sendError(f *senderr.SendError) *SendError {
	f.Cause = explainProtocol(f.Cause)
	return f
}

// failedBefore is the error of the send of message id that failed before
// any attempt: why it ended (reason, one of the sentinels or a context's
// cause), the caller's context error when it stopped the send, and the
// error to give as its Cause.
func failedBefore(id string, reason, ctxErr, cause error) *SendError {
	se := senderr.NewSendError(reason, ctxErr)
	se.MessageID, se.Cause = id, cause
	return sendError(se)
}

// runSend runs x to its end: nil when its message is stored, else the
// send's *SendError.
func runSend(ctx context.Context, x *send.Executor) *SendError {
	if f, failed := x.Run(ctx); failed {
		return sendError(f)
	}
	return nil
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
