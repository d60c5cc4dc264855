package producer

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq/rmqtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
)

// TestInterceptorRocketMQ5HalfNotRetriedAfterUnknown: an apache.rocketmq.v2
// SendMessage of a TRANSACTION (half) message through the interceptor is
// not retried after an unknown outcome (50001: the proxy may have stored
// it), as Transaction.Send's is not: a retry could store a second half
// with another transaction ID, left to the broker's check. A NORMAL
// message with the same answers is retried. Regression: the interceptor
// read only rocketry.v1 requests' facts, and sent the half three times.
func TestInterceptorRocketMQ5HalfNotRetriedAfterUnknown(t *testing.T) {
	t.Parallel()
	srv := rmqtest.Start(t)
	srv.SetAnswer(func(*rocketmqv2.SendMessageRequest) *rocketmqv2.SendMessageResponse {
		return &rocketmqv2.SendMessageResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_INTERNAL_SERVER_ERROR}}
	})
	rec := &recorder{}
	cc := dialWith(t, srv.Addr, UnaryClientInterceptor(WithMaxAttempts(3), WithObserver(rec.observe)))
	client := rocketmqv2.NewMessagingServiceClient(cc)
	req := func(id string, typ rocketmqv2.MessageType) *rocketmqv2.SendMessageRequest {
		return &rocketmqv2.SendMessageRequest{Messages: []*rocketmqv2.Message{{
			Topic:            &rocketmqv2.Resource{Name: "t"},
			SystemProperties: &rocketmqv2.SystemProperties{MessageId: id, BodyEncoding: rocketmqv2.Encoding_IDENTITY, MessageType: typ},
			Body:             []byte("x"),
		}}}
	}
	sends := func() (n int) {
		srv.Seen(func(s *rmqtest.Server) { n = len(s.Sends) })
		return n
	}

	_, err := client.SendMessage(context.Background(), req("01HALF", rocketmqv2.MessageType_TRANSACTION))
	var se *SendError
	require.ErrorAs(t, err, &se)
	assert.ErrorIs(t, err, ErrNotRetryable)
	assert.Equal(t, 1, se.Attempts)
	assert.Equal(t, FailedUnknown, se.Last)
	assert.Equal(t, "01HALF", se.MessageID, "the error names the half message")
	assert.Equal(t, 1, sends(), "the half message went once")
	assert.Equal(t, "attempt exhausted", rec.kinds("01HALF"))

	_, err = client.SendMessage(context.Background(), req("01NORMAL", rocketmqv2.MessageType_NORMAL))
	require.ErrorAs(t, err, &se)
	assert.ErrorIs(t, err, ErrAttemptsExhausted)
	assert.Equal(t, 3, se.Attempts)
	assert.Equal(t, 4, sends(), "a normal message is retried")
}

// TestInterceptorCallScheduleSetsAttempts: a per-call throttle schedule
// that does not know its length gives the call the default attempts, not
// those the interceptor's schedule of known length set (a delivery
// policy's NumRetries + 1), as
// the same options given together at once would; one that knows its
// length sets them, one that leaves the schedule leaves them, and a
// per-call WithMaxAttempts wins. Regression: the call kept the policy's 6
// attempts under a schedule of its own.
func TestInterceptorCallScheduleSetsAttempts(t *testing.T) {
	t.Parallel()
	pol, err := backoff.NewDeliveryPolicy(backoff.HealthyRetryPolicy{MinDelayTarget: 1, MaxDelayTarget: 1, NumRetries: 5})
	require.NoError(t, err)
	short, err := backoff.NewDeliveryPolicy(backoff.HealthyRetryPolicy{MinDelayTarget: 1, MaxDelayTarget: 1, NumRetries: 1})
	require.NoError(t, err)
	cc := func(t *testing.T, s *stub) *grpc.ClientConn {
		return dialWith(t, startStub(t, s), UnaryClientInterceptor(WithThrottleSchedule(backoff.Scale(pol, 0.001)), WithPacing(false)))
	}
	for _, tc := range []struct {
		name  string
		copts []grpc.CallOption
		want  int
	}{
		{"schedule of unknown length", []grpc.CallOption{WithCallOptions(WithThrottleSchedule(backoff.Constant(time.Millisecond)))}, DefaultMaxAttempts},
		{"per-call attempts win", []grpc.CallOption{WithCallOptions(WithThrottleSchedule(backoff.Constant(time.Millisecond)), WithMaxAttempts(4))}, 4},
		{"per-call option that leaves the schedule", []grpc.CallOption{WithCallOptions(WithRand(nil))}, 6},
		{"schedule of known length", []grpc.CallOption{WithCallOptions(WithRand(nil)), WithCallOptions(WithThrottleSchedule(backoff.Scale(short, 0.001)))}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &stub{script: slices.Repeat([]error{err530}, 10)}
			_, err := rocketryv1.NewMessagingServiceClient(cc(t, s)).SendMessage(context.Background(), sendReq("x", false), tc.copts...)
			var se *SendError
			require.ErrorAs(t, err, &se)
			assert.ErrorIs(t, err, ErrAttemptsExhausted)
			assert.Equal(t, tc.want, se.Attempts)
			assert.Equal(t, tc.want, s.count())
		})
	}
}
