package producer

import (
	"context"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/rocketry-go/rocketry/brokercode"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDecisionsOnBothProtocols runs one table of the retry decisions
// against the bundled broker's two faces: rocketry.v1 and
// apache.rocketmq.v2. The rows differ where the protocols say different
// things: RocketMQ 5's 50001 may come after a proxy stored the message, so
// it is an unknown outcome, where rocketry.v1's 500 detail says "not
// stored".
func TestDecisionsOnBothProtocols(t *testing.T) {
	type want struct {
		err      error // nil: stored
		attempts int
		last     OutcomeKind
		lastAlt  OutcomeKind // also accepted
		code     brokercode.Code
		wire     int32 // 0: do not check
	}
	tests := []struct {
		name  string
		opts  []broker.Option
		setup func(t *testing.T, b *broker.Broker, p *Producer)
		m     func() *Message
		v1    want
		v2    want
	}{
		{
			name: "stored at once",
			v1:   want{attempts: 1},
			v2:   want{attempts: 1},
		},
		{
			name: "throttled until the attempts are spent",
			opts: []broker.Option{broker.WithThrottle(broker.Throttle{MaxBacklog: 1, BacklogLowWater: 1})},
			setup: func(t *testing.T, b *broker.Broker, p *Producer) {
				// A consumer group that consumes nothing: the backlog
				// grows with every message stored.
				_, err := consumerClient(t, b).ReceiveMessages(context.Background(), &rocketryv1.ReceiveMessagesRequest{Topic: "t", Group: "g", MaxMessages: 1})
				require.NoError(t, err)
				for range 3 {
					_, _ = p.Send(context.Background(), msg("t"))
				}
			},
			v1: want{err: ErrAttemptsExhausted, attempts: 3, last: Throttled, code: brokercode.TooManyRequests, wire: 530},
			v2: want{err: ErrAttemptsExhausted, attempts: 3, last: Throttled, code: brokercode.TooManyRequests, wire: 42900},
		},
		{
			name: "INTERNAL until the attempts are spent",
			opts: []broker.Option{broker.WithFaults(broker.Faults{InternalRate: 1})},
			v1:   want{err: ErrAttemptsExhausted, attempts: 3, last: FailedNotStored, code: brokercode.InternalError, wire: 500},
			v2:   want{err: ErrAttemptsExhausted, attempts: 3, last: FailedUnknown, code: brokercode.InternalError, wire: 50001},
		},
		{
			name: "unavailable until the attempts are spent",
			opts: []broker.Option{broker.WithFaults(broker.Faults{Unavailable: true})},
			v1:   want{err: ErrAttemptsExhausted, attempts: 3, last: FailedNotStored, code: brokercode.Unavailable},
			v2:   want{err: ErrAttemptsExhausted, attempts: 3, last: FailedNotStored, code: brokercode.Unavailable},
		},
		{
			name: "no answer: each attempt times out",
			opts: []broker.Option{broker.WithFaults(broker.Faults{BlackholeRate: 1})},
			// The attempt's deadline reaches the broker: when the
			// broker's copy ends first, it answers that it stored
			// nothing (503 detail), else the client's own timeout is
			// an unknown outcome.
			v1: want{err: ErrAttemptsExhausted, attempts: 3, last: FailedUnknown, lastAlt: FailedNotStored},
			v2: want{err: ErrAttemptsExhausted, attempts: 3, last: FailedUnknown, lastAlt: FailedNotStored},
		},
		{
			name: "bad request is never retried",
			m:    func() *Message { return &Message{Topic: "a topic with spaces", Body: []byte("x")} },
			v1:   want{err: ErrNotRetryable, attempts: 1, last: Permanent, code: brokercode.BadRequest},
			v2:   want{err: ErrNotRetryable, attempts: 1, last: Permanent, code: brokercode.BadRequest},
		},
		{
			name: "unknown topic is never retried",
			opts: []broker.Option{broker.WithAutoCreateTopics(false), broker.WithTopics("other")},
			v1:   want{err: ErrNotRetryable, attempts: 1, last: Permanent, code: brokercode.TopicNotFound, wire: 404},
			v2:   want{err: ErrNotRetryable, attempts: 1, last: Permanent, code: brokercode.TopicNotFound, wire: 40402},
		},
	}
	for _, proto := range []Protocol{RocketryV1, RocketMQ5} {
		for _, tt := range tests {
			t.Run(proto.String()+"/"+tt.name, func(t *testing.T) {
				b := brokertest.Start(t, tt.opts...)
				p := newTestProducer(t, b.Addr(), WithProtocol(proto), WithMaxAttempts(3),
					WithThrottleSchedule(msSchedule(t)), WithAttemptTimeout(200*time.Millisecond), WithPacing(false))
				if tt.setup != nil {
					tt.setup(t, b, p)
				}
				m := msg("t")
				if tt.m != nil {
					m = tt.m()
				}
				w := tt.v1
				if proto == RocketMQ5 {
					w = tt.v2
				}
				before := b.Stats().GetStored()
				r, err := p.Send(context.Background(), m)
				if w.err == nil {
					require.NoError(t, err)
					assert.Equal(t, w.attempts, r.Attempts)
					assert.Equal(t, before+1, b.Stats().GetStored())
					return
				}
				var se *SendError
				require.ErrorAs(t, err, &se)
				assert.ErrorIs(t, err, w.err)
				assert.Equal(t, w.attempts, se.Attempts, "attempts")
				if se.Last != w.lastAlt || w.lastAlt == 0 {
					assert.Equal(t, w.last, se.Last, "last outcome of %v", err)
				}
				if w.code != 0 {
					assert.Equal(t, w.code, se.Code, "code")
				}
				if w.wire != 0 {
					assert.Equal(t, w.wire, se.WireCode, "wire code")
				}
				assert.Equal(t, before, b.Stats().GetStored(), "nothing stored")
			})
		}
	}
}

// TestRocketMQFailsOverToAnotherBroker: after a failure known not stored,
// the next attempt goes to a queue of another broker name (RocketMQ's own
// rule); the message is stored once, on the healthy broker.
func TestRocketMQFailsOverToAnotherBroker(t *testing.T) {
	t.Parallel()
	bs := brokertest.StartCluster(t, 2)
	require.NoError(t, bs[0].SetFaults(broker.Faults{Unavailable: true}))
	p := newTestProducer(t, bs[0].Addr(), WithProtocol(RocketMQ5), WithPacing(false))
	for range 10 {
		r, err := p.Send(context.Background(), msg("t"))
		require.NoError(t, err)
		assert.LessOrEqual(t, r.Attempts, 2)
	}
	assert.Len(t, bs[1].Messages("t"), 10)
	assert.Empty(t, bs[0].Messages("t"))
}

// TestInterceptorRetriesRocketMQ5: the interceptor's default classifier
// reads apache.rocketmq.v2 body statuses, so a SendMessage made by any
// client code through it is retried by the same rules: 50001 and 42900 are
// retried, a 4xxxx is returned at once.
func TestInterceptorRetriesRocketMQ5(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, broker.WithFaults(broker.Faults{InternalRate: 1}))
	rec := &recorder{}
	cc := dialWith(t, b.Addr(), UnaryClientInterceptor(WithMaxAttempts(4), WithObserver(rec.observe)))
	client := rocketmqv2.NewMessagingServiceClient(cc)
	req := func(topic string) *rocketmqv2.SendMessageRequest {
		return &rocketmqv2.SendMessageRequest{Messages: []*rocketmqv2.Message{{
			Topic:            &rocketmqv2.Resource{Name: topic},
			SystemProperties: &rocketmqv2.SystemProperties{MessageId: "01AB", BodyEncoding: rocketmqv2.Encoding_IDENTITY, MessageType: rocketmqv2.MessageType_NORMAL},
			Body:             []byte("x"),
		}}}
	}
	_, err := client.SendMessage(context.Background(), req("t"))
	var se *SendError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 4, se.Attempts)
	assert.Equal(t, int32(50001), se.WireCode)
	assert.ErrorIs(t, err, ErrAttemptsExhausted)

	require.NoError(t, b.SetFaults(broker.Faults{}))
	r, err := client.SendMessage(context.Background(), req("t"))
	require.NoError(t, err)
	assert.Equal(t, rocketmqv2.Code_OK, r.GetStatus().GetCode())

	_, err = client.SendMessage(context.Background(), req("bad topic"))
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 1, se.Attempts)
	assert.ErrorIs(t, err, ErrNotRetryable)
}

// TestRocketMQSinkCheckedFirst: a body limit over the dead-letter sink's is
// reported before New reaches the proxy (here, nothing answers).
func TestRocketMQSinkCheckedFirst(t *testing.T) {
	t.Parallel()
	_, err := New("127.0.0.1:1", WithProtocol(RocketMQ5), WithDeadLetterSink(limitedSink{newMemSink(), 10}), WithMaxBodyBytes(11))
	var oe *OptionError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "WithMaxBodyBytes", oe.Option)
}
