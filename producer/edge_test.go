package producer

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/producer/internal/wire"
	"github.com/rocketry-go/rocketry/senderr"
)

// TestWireErrorsArePublic: each error of the wire leaves the producer
// (explainProtocol) as the public one, which it is (package senderr, whose
// names the producer re-exports): a *senderr.ConnectError as a
// *ConnectError with the public Reason and the same text, a sentinel
// wrapped with context so that errors.Is matches the public sentinel with
// the same text, a bad target as ErrInvalidTarget, RocketMQ 5's status as
// a *RocketMQStatusError, also inside a chain; any other error as it is.
func TestWireErrorsArePublic(t *testing.T) {
	t.Parallel()
	grpcErr := status.Error(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused\"")
	for _, tt := range []struct{ wire, public error }{
		{senderr.ErrConnectionRefused, ErrConnectionRefused},
		{senderr.ErrUnknownHost, ErrUnknownHost},
		{senderr.ErrNotGRPC, ErrNotGRPC},
	} {
		in := &senderr.ConnectError{Endpoint: "127.0.0.1:1", Reason: tt.wire, Err: grpcErr}
		out := explainProtocol(in)
		var ce *ConnectError
		require.ErrorAs(t, out, &ce, "%v", tt.public)
		assert.Equal(t, "127.0.0.1:1", ce.Endpoint)
		assert.Same(t, tt.public, ce.Reason)
		assert.ErrorIs(t, out, tt.public)
		assert.Same(t, tt.wire, tt.public, "the wire's sentinel is the public one, no copy")
		assert.Equal(t, in.Error(), out.Error())
		assert.Equal(t, codes.Unavailable, status.Code(out))
	}
	for _, tt := range []struct{ wire, public error }{
		{senderr.ErrNoEndpoints, ErrNoEndpoints},
		{senderr.ErrClosed, ErrClosed},
		{senderr.ErrInvalidMessage, ErrInvalidMessage},
		{senderr.ErrAttemptsExhausted, ErrAttemptsExhausted},
		{senderr.ErrTransactionNotFound, ErrTransactionNotFound},
		{senderr.ErrRecallTooLate, ErrRecallTooLate},
		{senderr.ErrRecallHandle, ErrRecallHandle},
	} {
		assert.Equal(t, tt.wire.Error(), tt.public.Error(), "the same text")
		in := fmt.Errorf("producer: Resend: %w: target %q", tt.wire, "dns:///x")
		out := explainProtocol(in)
		assert.ErrorIs(t, out, tt.public)
		assert.Equal(t, in.Error(), out.Error())
		assert.ErrorIs(t, explainProtocol(tt.wire), tt.public, "bare")
	}
	for _, tt := range []struct{ wire, public error }{
		{senderr.ErrInvalidTarget, ErrInvalidTarget},
		{senderr.ErrUnauthorized, ErrUnauthorized},
		{senderr.ErrForbidden, ErrForbidden},
	} {
		assert.Same(t, tt.wire, tt.public, "one sentinel")
	}
	bad := explainProtocol(wire.BadTarget("producer: New(%q, WithProtocol(RocketryV1)): no resolver", "x://y"))
	assert.ErrorIs(t, bad, ErrInvalidTarget)
	assert.Equal(t, `producer: New("x://y", WithProtocol(RocketryV1)): no resolver`, bad.Error())

	// RocketMQ 5's status: bare, a *RocketMQStatusError; in a chain (with
	// a sentinel, as a recall's), errors.As finds it and errOutcome reads
	// it (IsThrottled, CodeOf).
	st := &senderr.StatusError{Code: 42900, Message: "BACKLOG"}
	var rs *RocketMQStatusError
	require.ErrorAs(t, explainProtocol(st), &rs)
	assert.Equal(t, RocketMQStatusError{Code: 42900, Message: "BACKLOG"}, *rs)
	assert.Equal(t, st.Error(), rs.Error())
	chain := explainProtocol(fmt.Errorf("producer: Recall(%q): %w: %w", "t", senderr.ErrRecallHandle, st))
	require.ErrorAs(t, chain, &rs)
	assert.Equal(t, int32(42900), rs.Code)
	assert.ErrorIs(t, chain, ErrRecallHandle)
	assert.True(t, IsThrottled(chain))
	var ce *ConnectError
	require.ErrorAs(t, explainProtocol(fmt.Errorf("producer: rocketmq start: %w", errors.Join(
		&senderr.ConnectError{Endpoint: "127.0.0.1:1", Reason: senderr.ErrConnectionRefused, Err: grpcErr}))), &ce, "a ConnectError in a chain")
	assert.Same(t, ErrConnectionRefused, ce.Reason)

	other := errors.New("other")
	assert.Same(t, other, explainProtocol(other))
	assert.NoError(t, explainProtocol(nil))
}
