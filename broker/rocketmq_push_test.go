package broker_test

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rocketry-go/rocketry/broker"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
)

// TestRocketMQPushConsumerSettings: a consumer's Settings are answered as
// the proxy's mergeSubscriptionData answers them: receive_batch_size 32,
// the longest long polling time, fifo false and the group's retry policy
// (17 attempts, the customized delays 1 s ... 2 h); the client's group
// and subscriptions are kept.
func TestRocketMQPushConsumerSettings(t *testing.T) {
	b, _ := start(t, broker.WithLongPolling(time.Second, 7*time.Second))
	c := dialV2(t, b.Addr())
	stream, err := c.Telemetry(ctx(t))
	require.NoError(t, err)
	push := rocketmqv2.ClientType_PUSH_CONSUMER
	require.NoError(t, stream.Send(&rocketmqv2.TelemetryCommand{Command: &rocketmqv2.TelemetryCommand_Settings{Settings: &rocketmqv2.Settings{
		ClientType: &push,
		PubSub: &rocketmqv2.Settings_Subscription{Subscription: &rocketmqv2.Subscription{
			Group:         &rocketmqv2.Resource{Name: "g"},
			Subscriptions: []*rocketmqv2.SubscriptionEntry{{Topic: &rocketmqv2.Resource{Name: "t"}, Expression: &rocketmqv2.FilterExpression{Type: rocketmqv2.FilterType_TAG, Expression: "*"}}},
		}},
	}}}))
	got, err := stream.Recv()
	require.NoError(t, err)
	st := got.GetSettings()
	require.NotNil(t, st)
	sub := st.GetSubscription()
	require.NotNil(t, sub, "subscription in the broker's Settings")
	assert.Equal(t, "g", sub.GetGroup().GetName())
	require.Len(t, sub.GetSubscriptions(), 1)
	assert.Equal(t, "t", sub.GetSubscriptions()[0].GetTopic().GetName())
	require.NotNil(t, sub.ReceiveBatchSize, "receive_batch_size is set")
	assert.Equal(t, int32(32), sub.GetReceiveBatchSize())
	require.NotNil(t, sub.LongPollingTimeout)
	assert.Equal(t, 7*time.Second, sub.GetLongPollingTimeout().AsDuration(), "long_polling_timeout: WithLongPolling's max")
	require.NotNil(t, sub.Fifo)
	assert.False(t, sub.GetFifo())
	assert.Equal(t, 3*time.Second, st.GetRequestTimeout().AsDuration())

	bp := st.GetBackoffPolicy()
	assert.Equal(t, int32(17), bp.GetMaxAttempts())
	cb := bp.GetCustomizedBackoff()
	require.NotNil(t, cb, "backoff_policy %v is customized", bp)
	var next []time.Duration
	for _, d := range cb.GetNext() {
		next = append(next, d.AsDuration())
	}
	assert.Equal(t, []time.Duration{
		time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second,
		time.Minute, 2 * time.Minute, 3 * time.Minute, 4 * time.Minute, 5 * time.Minute,
		6 * time.Minute, 7 * time.Minute, 8 * time.Minute, 9 * time.Minute, 10 * time.Minute,
		20 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour,
	}, next)
	require.NoError(t, stream.CloseSend())
	_, err = stream.Recv()
	assert.Equal(t, io.EOF, err)
}

// receiveAutoRenew runs one ReceiveMessage as the Node.js PushConsumer
// sends it: auto_renew and no invisible_duration.
func receiveAutoRenew(t testing.TB, c rocketmqv2.MessagingServiceClient, topic, group string) received {
	t.Helper()
	stream, err := c.ReceiveMessage(ctx(t), &rocketmqv2.ReceiveMessageRequest{
		Group:              &rocketmqv2.Resource{Name: group},
		MessageQueue:       &rocketmqv2.MessageQueue{Id: -1, Topic: &rocketmqv2.Resource{Name: topic}, Broker: &rocketmqv2.Broker{Name: broker.DefaultBrokerName}},
		FilterExpression:   &rocketmqv2.FilterExpression{Type: rocketmqv2.FilterType_TAG, Expression: "*"},
		BatchSize:          32,
		AutoRenew:          true,
		LongPollingTimeout: durationpb.New(time.Millisecond),
	})
	require.NoError(t, err)
	return readReceive(t, stream)
}

// TestRocketMQAutoRenew: a receive with auto_renew and no
// invisible_duration is served, not refused 40011; its messages stay
// invisible and their handles good while unacknowledged, past the proxy's
// default invisible time of 60 s, up to the proxy's renewal bound of 3 h,
// when they come again (attempt 2); an acknowledged one never does, and
// a ChangeInvisibleDuration ends the renewal.
func TestRocketMQAutoRenew(t *testing.T) {
	clock := newFakeClock()
	b, _ := start(t, broker.WithQueues(1), broker.WithLongPolling(0, 20*time.Millisecond), broker.WithClock(clock.Now))
	c := dialV2(t, b.Addr())
	for _, id := range []string{"m0", "m1", "m2"} {
		require.Equal(t, rocketmqv2.Code_OK, v2put(t, c, v2msg("t", id)))
	}
	r := receiveAutoRenew(t, c, "t", "g")
	require.Equal(t, rocketmqv2.Code_OK, r.status.GetCode(), "status %v", r.status)
	require.Equal(t, []string{"m0", "m1", "m2"}, r.ids())

	clock.Advance(10 * time.Minute) // far past the 60 s a handle starts with
	assert.Empty(t, receiveAutoRenew(t, c, "t", "g").ids(), "received while renewed")
	assert.Equal(t, []rocketmqv2.Code{rocketmqv2.Code_OK}, ack(t, c, "t", "g", handleOf(r.messages[0])), "ack with the receive's handle after 10 min")

	// The consumer nacks m1 as the Node.js client does after a failure: a
	// ChangeInvisibleDuration, after which it comes as the change says.
	resp, err := c.ChangeInvisibleDuration(ctx(t), &rocketmqv2.ChangeInvisibleDurationRequest{
		Group: &rocketmqv2.Resource{Name: "g"}, Topic: &rocketmqv2.Resource{Name: "t"},
		ReceiptHandle: handleOf(r.messages[1]), InvisibleDuration: durationpb.New(time.Second), MessageId: "m1",
	})
	require.NoError(t, err)
	require.Equal(t, rocketmqv2.Code_OK, resp.GetStatus().GetCode(), "status %v", resp.GetStatus())
	clock.Advance(time.Second)
	again := receiveAutoRenew(t, c, "t", "g")
	require.Equal(t, []string{"m1"}, again.ids(), "after its ChangeInvisibleDuration")
	assert.Equal(t, int32(2), again.messages[0].GetSystemProperties().GetDeliveryAttempt())
	assert.Equal(t, []rocketmqv2.Code{rocketmqv2.Code_OK}, ack(t, c, "t", "g", handleOf(again.messages[0])))

	// m2, never acknowledged, is renewed until 3 h after its receive.
	clock.Advance(3*time.Hour - 10*time.Minute - 2*time.Second)
	assert.Empty(t, receiveAutoRenew(t, c, "t", "g").ids(), "received a second before the renewal's bound")
	clock.Advance(time.Second)
	last := receiveAutoRenew(t, c, "t", "g")
	require.Equal(t, []string{"m2"}, last.ids(), "received again at the renewal's bound")
	assert.Equal(t, int32(2), last.messages[0].GetSystemProperties().GetDeliveryAttempt())
	assert.Equal(t, []rocketmqv2.Code{rocketmqv2.Code_INVALID_RECEIPT_HANDLE}, ack(t, c, "t", "g", handleOf(r.messages[2])), "the first handle once the renewal ended")
	assert.Equal(t, []rocketmqv2.Code{rocketmqv2.Code_OK}, ack(t, c, "t", "g", handleOf(last.messages[0])))
	assert.Equal(t, int64(0), groupBacklog(b, "t", "g"))
}
