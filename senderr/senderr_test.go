package senderr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestTexts: the sentinels keep the texts the producer's errors have
// always had (programs and logs match them).
func TestTexts(t *testing.T) {
	for _, tt := range []struct {
		err  error
		text string
	}{
		{ErrInvalidMessage, "producer: invalid message"},
		{ErrClosed, "producer: closed"},
		{ErrDeadlineTooShort, "producer: deadline too short for the next attempt"},
		{ErrNotRetryable, "producer: not retryable"},
		{ErrRetryBudget, "producer: retry budget spent"},
		{ErrGroupFailed, "producer: an earlier message of its group failed"},
		{ErrAttemptsExhausted, "producer: attempts exhausted"},
		{ErrInvalidTarget, "producer: invalid target"},
		{ErrConnectionRefused, "producer: connection refused"},
		{ErrUnknownHost, "producer: unknown host"},
		{ErrNotGRPC, "producer: not a gRPC server"},
		{ErrNoEndpoints, "producer: no endpoint resolved"},
		{ErrTransactionNotFound, "producer: the server has no such open transaction"},
		{ErrRecallTooLate, "producer: too late to recall: the message is due"},
		{ErrRecallHandle, "producer: invalid recall handle"},
		{ErrUnauthorized, "producer: credentials refused"},
		{ErrForbidden, "producer: permission refused"},
		{&StatusError{Code: 42900, Message: "BACKLOG"}, "producer: rocketmq status 42900 TOO_MANY_REQUESTS: BACKLOG"},
		{&ConnectError{Endpoint: "h:1", Reason: ErrConnectionRefused, Err: status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp h:1: connect: connection refused"`)},
			"producer: broker h:1 unreachable: connection refused (dial tcp h:1: connect: connection refused)"},
		{&AuthError{AccessKey: "ak", Endpoint: "h:1", Err: &StatusError{Code: 40100}}, `producer: rocketmq: access key "ak" refused by h:1: producer: rocketmq status 40100 UNAUTHORIZED`},
	} {
		if got := tt.err.Error(); got != tt.text {
			t.Errorf("%#v: %q, want %q", tt.err, got, tt.text)
		}
	}
}

// TestAuthError: errors.Is matches ErrUnauthorized, and ErrForbidden when
// Denied; status.Code reads the refusal's code.
func TestAuthError(t *testing.T) {
	refused := fmt.Errorf("start: %w", &AuthError{Err: &StatusError{Code: 40100}})
	denied := fmt.Errorf("start: %w", &AuthError{Denied: true, Err: &StatusError{Code: 40300}})
	if !errors.Is(refused, ErrUnauthorized) || errors.Is(refused, ErrForbidden) {
		t.Errorf("refused credentials: Is(ErrUnauthorized) %v, Is(ErrForbidden) %v", errors.Is(refused, ErrUnauthorized), errors.Is(refused, ErrForbidden))
	}
	if !errors.Is(denied, ErrUnauthorized) || !errors.Is(denied, ErrForbidden) {
		t.Errorf("refused permission: Is(ErrUnauthorized) %v, Is(ErrForbidden) %v", errors.Is(denied, ErrUnauthorized), errors.Is(denied, ErrForbidden))
	}
	if c := status.Code(refused); c != codes.Unauthenticated {
		t.Errorf("status.Code(refused) = %v", c)
	}
	if c := status.Code(denied); c != codes.PermissionDenied {
		t.Errorf("status.Code(denied) = %v", c)
	}
}

// TestSendError: a *SendError matches why the send ended and the caller's
// context error, not another sentinel, and unwraps to its Cause; its text
// is the producer's.
func TestSendError(t *testing.T) {
	cause := errors.New("boom")
	se := NewSendError(context.Canceled, context.Canceled)
	se.MessageID, se.Attempts, se.Cause, se.DeadLettered = "m1", 1, cause, true
	if !errors.Is(se, context.Canceled) || !errors.Is(se, cause) || errors.Is(se, ErrClosed) {
		t.Errorf("errors.Is(%v) reads the wrong reasons", se)
	}
	if got, want := se.Error(), `producer: send of message "m1" failed after 1 attempt (context canceled), handed to the dead-letter sink: boom`; got != want {
		t.Errorf("Error() = %q; want %q", got, want)
	}
	if got, want := NewSendError(ErrGroupFailed, nil).Error(), "producer: send failed after 0 attempts (an earlier message of its group failed)"; got != want {
		t.Errorf("Error() = %q; want %q", got, want)
	}
	// A context's cause that wraps an application's error (cancel(fmt.Errorf("app: %w", errShutdown))).
	errShutdown := errors.New("shutdown")
	wrapped := NewSendError(fmt.Errorf("app: %w", errShutdown), context.Canceled)
	if !errors.Is(wrapped, errShutdown) || !errors.Is(wrapped, context.Canceled) || errors.Is(wrapped, ErrClosed) {
		t.Errorf("errors.Is(%v) misses the cause's wrapped error", wrapped)
	}
}

// TestSendErrorGRPCStatus: status.Code reads a send's failure as a plain
// gRPC call's: the last attempt's status when there is one (the message
// the SendError's text), else from why the send ended.
func TestSendErrorGRPCStatus(t *testing.T) {
	withCause := NewSendError(ErrAttemptsExhausted, nil)
	withCause.Attempts, withCause.Cause = 3, status.Error(codes.ResourceExhausted, "busy")
	for _, tt := range []struct {
		err  *SendError
		want codes.Code
	}{
		{withCause, codes.ResourceExhausted},
		{NewSendError(ErrDeadlineTooShort, nil), codes.DeadlineExceeded},
		{NewSendError(context.DeadlineExceeded, context.DeadlineExceeded), codes.DeadlineExceeded},
		{NewSendError(context.Canceled, context.Canceled), codes.Canceled},
		{NewSendError(ErrClosed, nil), codes.Canceled},
		{NewSendError(ErrRetryBudget, nil), codes.Unknown},
	} {
		var err error = fmt.Errorf("wrapped: %w", tt.err)
		if got := status.Code(err); got != tt.want {
			t.Errorf("status.Code(%v) = %v; want %v", tt.err, got, tt.want)
		}
	}
	if got := status.Convert(withCause).Message(); got != withCause.Error() {
		t.Errorf("status message %q; want the SendError's text %q", got, withCause.Error())
	}
}
