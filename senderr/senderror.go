package senderr

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/brokercode"
	"github.com/rocketry-go/rocketry/outcome"
)

// SendError is the error of a send that made at least one attempt (or was
// cancelled before it could) and did not store its message: the failure
// the producer's executor makes, and the error the producer gives
// (producer.SendError). errors.Is works both with the reason the send
// ended (ErrAttemptsExhausted, ErrDeadlineTooShort, ErrNotRetryable,
// ErrRetryBudget, ErrClosed, ErrGroupFailed, or the caller's context
// error) and with the last attempt's error, Cause.
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
	Last outcome.Kind
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

// One writer: a SendError is made by the one that ends the send (the
// producer's executor, or the producer for a send stopped before any
// attempt), and none of its fields changes after it is given out, but
// DeadLettered, which the dead-letter hand-off sets before the send
// returns it.

// NewSendError is a *SendError that errors.Is matches with reason, why the
// send ended (one of the sentinels, or the cause of the context that
// stopped it), and with ctxErr, the caller's context error when it stopped
// the send (nil otherwise). The caller sets the other fields.
func NewSendError(reason, ctxErr error) *SendError {
	return &SendError{kind: reason, ctxErr: ctxErr}
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

// GRPCStatus is the send's gRPC status, so that status.Code reads it
// through the interceptor as from a plain call: the last attempt's
// status (its code and details) when Cause carries one; else, for a send
// that ended before an attempt could carry one, DeadlineExceeded when a
// deadline ended it (the caller's, or ErrDeadlineTooShort), Canceled when
// the caller's context was cancelled or the producer closed, Unknown
// otherwise. Its message is the SendError's text.
func (e *SendError) GRPCStatus() *status.Status {
	var gs interface{ GRPCStatus() *status.Status }
	if e.Cause != nil && errors.As(e.Cause, &gs) {
		p := gs.GRPCStatus().Proto()
		p.Message = e.Error()
		return status.FromProto(p)
	}
	code := codes.Unknown
	switch {
	case errors.Is(e, context.DeadlineExceeded) || errors.Is(e, ErrDeadlineTooShort):
		code = codes.DeadlineExceeded
	case errors.Is(e, context.Canceled) || errors.Is(e, ErrClosed):
		code = codes.Canceled
	}
	return status.New(code, e.Error())
}

// Is reports whether target is why the send ended (one of the sentinels, or
// the cause of the caller's context, or an error that cause wraps), or the
// caller's context error when it stopped the send.
func (e *SendError) Is(target error) bool {
	if target == nil {
		return false
	}
	return target == e.kind || target == e.ctxErr || (e.kind != nil && errors.Is(e.kind, target))
}
