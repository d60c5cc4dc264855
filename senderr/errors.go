package senderr

import "errors"

// The sentinels. Their texts are the producer's: a sentinel is wrapped, as
// it is, in errors that the producer returns.
var (
	// ErrInvalidMessage is returned, wrapped with what is wrong, when a
	// message fails validation (nil, empty topic, body over the limit); no
	// attempt is made.
	ErrInvalidMessage = errors.New("producer: invalid message")

	// ErrClosed is returned when a send is started on a closed producer,
	// and is wrapped by the error of a send that Close cancelled.
	ErrClosed = errors.New("producer: closed")

	// ErrAttemptsExhausted is wrapped by the error of a send (or of a
	// RocketMQ 5 EndTransaction or RecallMessage) when every attempt
	// allowed was made and the last one failed.
	ErrAttemptsExhausted = errors.New("producer: attempts exhausted")

	// ErrDeadlineTooShort is wrapped by a *SendError when the wait before
	// the next attempt would end after the caller's deadline: the send
	// fails at once instead of sleeping past it.
	ErrDeadlineTooShort = errors.New("producer: deadline too short for the next attempt")

	// ErrNotRetryable is wrapped by a *SendError when an attempt failed in
	// a way that is never retried: a 4xx answer, or an unknown outcome
	// (timeout, lost connection, 5xx) of a transactional message.
	ErrNotRetryable = errors.New("producer: not retryable")

	// ErrRetryBudget is wrapped by a *SendError when a retry was refused
	// because the retry budget is spent.
	ErrRetryBudget = errors.New("producer: retry budget spent")

	// ErrGroupFailed is wrapped by the *SendError of a FIFO message that
	// was waiting behind a message of its group that failed for good: it
	// fails without an attempt, and its Cause wraps that first failure.
	ErrGroupFailed = errors.New("producer: an earlier message of its group failed")

	// ErrInvalidTarget is returned, wrapped with what is wrong, when a
	// producer's target is empty, is not a list of host:port, names a
	// scheme no resolver is registered for, or has a scheme where the
	// protocol takes none.
	ErrInvalidTarget = errors.New("producer: invalid target")

	// ErrConnectionRefused is the Reason of a *ConnectError when the
	// broker's host refused the connection: nothing listens on its port.
	ErrConnectionRefused = errors.New("producer: connection refused")

	// ErrUnknownHost is the Reason of a *ConnectError when the broker's
	// host name does not resolve.
	ErrUnknownHost = errors.New("producer: unknown host")

	// ErrNotGRPC is the Reason of a *ConnectError when something answered
	// on the broker's port but not as a gRPC server (an HTTP/1 server,
	// say).
	ErrNotGRPC = errors.New("producer: not a gRPC server")

	// ErrNoEndpoints is wrapped by an attempt's error when a target with a
	// scheme has no endpoint to send to: its resolver gave no address,
	// failed, or has not answered within the attempt. The message is
	// known not stored.
	ErrNoEndpoints = errors.New("producer: no endpoint resolved")

	// ErrTransactionNotFound is wrapped by the error of a RocketMQ 5
	// commit or roll back the server answered with "no such transaction".
	ErrTransactionNotFound = errors.New("producer: the server has no such open transaction")

	// ErrRecallTooLate is wrapped by a RocketMQ 5 recall's error when the
	// message is due already.
	ErrRecallTooLate = errors.New("producer: too late to recall: the message is due")

	// ErrRecallHandle is wrapped by a RocketMQ 5 recall's error when the
	// server refused the handle as invalid.
	ErrRecallHandle = errors.New("producer: invalid recall handle")

	// ErrUnauthorized is matched (errors.Is) by an *AuthError: a RocketMQ
	// 5 server refused the producer's credentials or their permission.
	ErrUnauthorized = errors.New("producer: credentials refused")

	// ErrForbidden is matched, besides ErrUnauthorized, by the *AuthError
	// of a refused permission.
	ErrForbidden = errors.New("producer: permission refused")
)
