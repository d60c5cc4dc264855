// Regression tests for decisions that had drifted apart: each pins a bug
// found where the same rule was written in two places.

package producer

import (
	"context"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq/rmqtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRmqBodyOverServerMaxIsRefusedBeforeAnyAttempt: a body over the
// server's max_body_size is an invalid message, refused by Send and
// SendAsync before any attempt, and never reaches the dead-letter sink.
// It used to fail at attempt time, as a counted attempt that was kept.
func TestRmqBodyOverServerMaxIsRefusedBeforeAnyAttempt(t *testing.T) {
	t.Parallel()
	srv := rmqtest.Start(t)
	srv.SetSettings(rmqtest.Settings(4))
	srv.SetRoute("t", rmqtest.QueueOn(t, srv, "t", "broker-a", 0))
	sink := newMemSink()
	p := newTestProducer(t, srv.Addr, WithProtocol(RocketMQ5), WithDeadLetterSink(sink))

	_, err := p.Send(context.Background(), &Message{Topic: "t", Body: []byte("12345")})
	require.ErrorIs(t, err, ErrInvalidMessage)
	assert.Contains(t, err.Error(), "max_body_size of 4")
	err = p.SendAsync(context.Background(), &Message{Topic: "t", Body: []byte("12345")}, func(*SendReceipt, error) {
		t.Error("the callback of a refused message ran")
	})
	require.ErrorIs(t, err, ErrInvalidMessage)

	_, err = p.Send(context.Background(), &Message{Topic: "t", Body: []byte("1234")})
	require.NoError(t, err)
	srv.Seen(func(s *rmqtest.Server) { assert.Len(t, s.Sends, 1, "only the valid message was sent") })
	sink.mu.Lock()
	defer sink.mu.Unlock()
	assert.Zero(t, sink.puts, "an invalid message is not a dead letter")
}

// TestInterceptorNamesConnectError: a call through the interceptor to a
// port nobody listens on fails as a Producer's send does, with a
// *ConnectError that names the target and ErrConnectionRefused (issue 21:
// "the request never left the client" is read in one function, wire.NotSent;
// the interceptor's reading named no ConnectError).
func TestInterceptorNamesConnectError(t *testing.T) {
	t.Parallel()
	addr := rmqtest.ClosedAddr(t)
	cc := dialWith(t, addr, UnaryClientInterceptor(WithMaxAttempts(2), WithWaitForReady(false),
		WithFailureSchedule(backoff.Constant(time.Millisecond))))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := rocketryv1.NewMessagingServiceClient(cc).SendMessage(ctx, sendReq("refused", false))
	var ce *ConnectError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, addr, ce.Endpoint)
	assert.ErrorIs(t, err, ErrConnectionRefused)
	assert.ErrorIs(t, err, ErrAttemptsExhausted, "known not stored: retried, then out of attempts")
	var se *SendError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 2, se.Attempts)
	assert.Equal(t, FailedNotStored, se.Last)
}
