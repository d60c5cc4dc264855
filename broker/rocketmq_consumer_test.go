package broker_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rocketry-go/rocketry/broker"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// consumerOpts are the options of a broker whose empty receives end
// quickly and whose invisible times may be short.
func consumerOpts(opts ...broker.Option) []broker.Option {
	return append([]broker.Option{broker.WithLongPolling(0, 20*time.Millisecond), broker.WithMinInvisibleDuration(0)}, opts...)
}

// v2put sends m alone and returns the code of its answer.
func v2put(t testing.TB, c rocketmqv2.MessagingServiceClient, m *rocketmqv2.Message) rocketmqv2.Code {
	t.Helper()
	resp, err := c.SendMessage(ctx(t), &rocketmqv2.SendMessageRequest{Messages: []*rocketmqv2.Message{m}})
	require.NoError(t, err, "v2 SendMessage(%s)", m.GetSystemProperties().GetMessageId())
	return resp.GetStatus().GetCode()
}

// fifoMsg is a FIFO message of group.
func fifoMsg(topic, id, group string) *rocketmqv2.Message {
	m := v2msg(topic, id)
	m.SystemProperties.MessageType = rocketmqv2.MessageType_FIFO
	m.SystemProperties.MessageGroup = &group
	return m
}

// timedMsg is a DELAY message due at at.
func timedMsg(topic, id string, at time.Time) *rocketmqv2.Message {
	m := v2msg(topic, id)
	m.SystemProperties.MessageType = rocketmqv2.MessageType_DELAY
	m.SystemProperties.DeliveryTimestamp = timestamppb.New(at)
	return m
}

// received is what one ReceiveMessage stream carried.
type received struct {
	status   *rocketmqv2.Status
	messages []*rocketmqv2.Message
	kinds    string // the stream's items in order: S status, M message, T delivery timestamp
}

func (r received) ids() []string {
	var out []string
	for _, m := range r.messages {
		out = append(out, m.GetSystemProperties().GetMessageId())
	}
	return out
}

// receiveV2 runs one ReceiveMessage for group on topic.
func receiveV2(t testing.TB, c rocketmqv2.MessagingServiceClient, topic, group string, batch int32, invisible time.Duration) received {
	t.Helper()
	stream, err := c.ReceiveMessage(ctx(t), &rocketmqv2.ReceiveMessageRequest{
		Group:              &rocketmqv2.Resource{Name: group},
		MessageQueue:       &rocketmqv2.MessageQueue{Topic: &rocketmqv2.Resource{Name: topic}, Broker: &rocketmqv2.Broker{Name: broker.DefaultBrokerName}},
		FilterExpression:   &rocketmqv2.FilterExpression{Type: rocketmqv2.FilterType_TAG, Expression: "*"},
		BatchSize:          batch,
		InvisibleDuration:  durationpb.New(invisible),
		LongPollingTimeout: durationpb.New(time.Millisecond),
	})
	require.NoError(t, err)
	return readReceive(t, stream)
}

// readReceive reads a ReceiveMessage stream to its end.
func readReceive(t testing.TB, stream grpc.ServerStreamingClient[rocketmqv2.ReceiveMessageResponse]) received {
	t.Helper()
	var r received
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return r
		}
		require.NoError(t, err, "ReceiveMessage stream")
		switch c := resp.Content.(type) {
		case *rocketmqv2.ReceiveMessageResponse_Status:
			r.status = c.Status
			r.kinds += "S"
		case *rocketmqv2.ReceiveMessageResponse_Message:
			r.messages = append(r.messages, c.Message)
			r.kinds += "M"
		case *rocketmqv2.ReceiveMessageResponse_DeliveryTimestamp:
			r.kinds += "T"
		}
	}
}

func handleOf(m *rocketmqv2.Message) string { return m.GetSystemProperties().GetReceiptHandle() }

// ack acknowledges ms and returns each entry's code.
func ack(t testing.TB, c rocketmqv2.MessagingServiceClient, topic, group string, handles ...string) []rocketmqv2.Code {
	t.Helper()
	req := &rocketmqv2.AckMessageRequest{Group: &rocketmqv2.Resource{Name: group}, Topic: &rocketmqv2.Resource{Name: topic}}
	for _, h := range handles {
		req.Entries = append(req.Entries, &rocketmqv2.AckMessageEntry{ReceiptHandle: h})
	}
	resp, err := c.AckMessage(ctx(t), req)
	require.NoError(t, err)
	var out []rocketmqv2.Code
	for _, e := range resp.Entries {
		out = append(out, e.GetStatus().GetCode())
	}
	return out
}

func TestRocketMQReceiveAndAck(t *testing.T) {
	b, _ := start(t, consumerOpts(broker.WithQueues(2))...)
	c := dialV2(t, b.Addr())
	for i := range 3 {
		require.Equal(t, rocketmqv2.Code_OK, v2put(t, c, v2msg("orders", fmt.Sprintf("m%d", i))))
	}
	r := receiveV2(t, c, "orders", "g", 10, time.Minute)
	assert.Equal(t, "SMMMT", r.kinds, "stream items: a status, the messages, a delivery timestamp")
	assert.Equal(t, rocketmqv2.Code_OK, r.status.GetCode())
	assert.ElementsMatch(t, []string{"m0", "m1", "m2"}, r.ids())
	var handles []string
	for _, m := range r.messages {
		sp := m.GetSystemProperties()
		sum := md5.Sum(m.Body)
		assert.Equal(t, strings.ToUpper(hex.EncodeToString(sum[:])), sp.GetBodyDigest().GetChecksum(), "MD5 digest of %s", sp.GetMessageId())
		assert.Equal(t, rocketmqv2.DigestType_MD5, sp.GetBodyDigest().GetType())
		assert.Equal(t, int32(1), sp.GetDeliveryAttempt(), "delivery attempt of %s", sp.GetMessageId())
		assert.Equal(t, rocketmqv2.MessageType_NORMAL, sp.GetMessageType())
		assert.Equal(t, "orders", m.GetTopic().GetName())
		handles = append(handles, handleOf(m))
	}
	assert.Equal(t, int64(3), groupBacklog(b, "orders", "g"), "backlog of g before its acks")

	empty := receiveV2(t, c, "orders", "g", 10, time.Minute)
	assert.Equal(t, "ST", empty.kinds, "stream of an empty receive")
	assert.Equal(t, rocketmqv2.Code_MESSAGE_NOT_FOUND, empty.status.GetCode())

	assert.Equal(t, []rocketmqv2.Code{rocketmqv2.Code_OK, rocketmqv2.Code_OK, rocketmqv2.Code_OK}, ack(t, c, "orders", "g", handles...))
	assert.Equal(t, []rocketmqv2.Code{rocketmqv2.Code_OK}, ack(t, c, "orders", "g", handles[0]), "a second ack of one message")
	assert.Equal(t, int64(0), groupBacklog(b, "orders", "g"), "backlog of g after its acks")
	assert.Equal(t, rocketmqv2.Code_MESSAGE_NOT_FOUND, receiveV2(t, c, "orders", "g", 10, time.Minute).status.GetCode())

	other := receiveV2(t, c, "orders", "other", 10, time.Minute)
	assert.ElementsMatch(t, []string{"m0", "m1", "m2"}, other.ids(), "a second group receives every message too")
}

func groupBacklog(b *broker.Broker, topic, group string) int64 {
	for _, ts := range b.Stats().GetTopics() {
		if ts.GetTopic() != topic {
			continue
		}
		for _, g := range ts.GetGroups() {
			if g.GetGroup() == group {
				return g.GetBacklog()
			}
		}
	}
	return -1
}

func TestRocketMQRedeliveryAfterInvisibleTime(t *testing.T) {
	clock := newFakeClock()
	b, _ := start(t, consumerOpts(broker.WithQueues(1), broker.WithClock(clock.Now))...)
	c := dialV2(t, b.Addr())
	require.Equal(t, rocketmqv2.Code_OK, v2put(t, c, v2msg("t", "m0")))

	first := receiveV2(t, c, "t", "g", 1, 10*time.Second)
	require.Equal(t, []string{"m0"}, first.ids())
	clock.Advance(9 * time.Second)
	assert.Empty(t, receiveV2(t, c, "t", "g", 1, 10*time.Second).ids(), "received while invisible")

	clock.Advance(time.Second)
	again := receiveV2(t, c, "t", "g", 1, 10*time.Second)
	require.Equal(t, []string{"m0"}, again.ids(), "received again once its invisible time is over")
	assert.Equal(t, int32(2), again.messages[0].GetSystemProperties().GetDeliveryAttempt())
	assert.NotEqual(t, handleOf(first.messages[0]), handleOf(again.messages[0]), "receipt handle of the second delivery")

	assert.Equal(t, []rocketmqv2.Code{rocketmqv2.Code_INVALID_RECEIPT_HANDLE}, ack(t, c, "t", "g", handleOf(first.messages[0])), "ack with the first delivery's handle")
	assert.Equal(t, []rocketmqv2.Code{rocketmqv2.Code_OK}, ack(t, c, "t", "g", handleOf(again.messages[0])))
	clock.Advance(time.Minute)
	assert.Empty(t, receiveV2(t, c, "t", "g", 1, 10*time.Second).ids(), "received after its ack")
}

func TestRocketMQChangeInvisibleDuration(t *testing.T) {
	clock := newFakeClock()
	b, _ := start(t, consumerOpts(broker.WithQueues(1), broker.WithClock(clock.Now))...)
	c := dialV2(t, b.Addr())
	require.Equal(t, rocketmqv2.Code_OK, v2put(t, c, v2msg("t", "m0")))
	r := receiveV2(t, c, "t", "g", 1, time.Minute)
	require.Len(t, r.messages, 1)
	change := func(handle string, d time.Duration) *rocketmqv2.ChangeInvisibleDurationResponse {
		resp, err := c.ChangeInvisibleDuration(ctx(t), &rocketmqv2.ChangeInvisibleDurationRequest{
			Group: &rocketmqv2.Resource{Name: "g"}, Topic: &rocketmqv2.Resource{Name: "t"},
			ReceiptHandle: handle, InvisibleDuration: durationpb.New(d), MessageId: "m0",
		})
		require.NoError(t, err)
		return resp
	}
	longer := change(handleOf(r.messages[0]), 2*time.Minute)
	require.Equal(t, rocketmqv2.Code_OK, longer.GetStatus().GetCode())
	clock.Advance(90 * time.Second)
	assert.Empty(t, receiveV2(t, c, "t", "g", 1, time.Minute).ids(), "received within its lengthened invisible time")
	assert.Equal(t, rocketmqv2.Code_INVALID_RECEIPT_HANDLE, change(handleOf(r.messages[0]), 0).GetStatus().GetCode(), "change with the old handle")

	now := change(longer.GetReceiptHandle(), 0)
	require.Equal(t, rocketmqv2.Code_OK, now.GetStatus().GetCode())
	again := receiveV2(t, c, "t", "g", 1, time.Minute)
	require.Equal(t, []string{"m0"}, again.ids(), "received once made visible")
	assert.Equal(t, int32(2), again.messages[0].GetSystemProperties().GetDeliveryAttempt())
	assert.Equal(t, rocketmqv2.Code_ILLEGAL_INVISIBLE_TIME, change(handleOf(again.messages[0]), 13*time.Hour).GetStatus().GetCode())
}

// TestRocketMQFIFOGroupOrder: the messages of a group are received in the
// order they were stored, the next one only after the previous one is
// acknowledged, also when one is received again after its invisible time;
// other groups go on meanwhile.
func TestRocketMQFIFOGroupOrder(t *testing.T) {
	clock := newFakeClock()
	b, _ := start(t, consumerOpts(broker.WithQueues(1), broker.WithClock(clock.Now), broker.WithTopicType("fifo", broker.TopicFIFO))...)
	c := dialV2(t, b.Addr())
	for _, m := range []*rocketmqv2.Message{
		fifoMsg("fifo", "a0", "A"), fifoMsg("fifo", "b0", "B"), fifoMsg("fifo", "a1", "A"),
		fifoMsg("fifo", "a2", "A"), fifoMsg("fifo", "b1", "B"),
	} {
		require.Equal(t, rocketmqv2.Code_OK, v2put(t, c, m))
	}
	const inv = 10 * time.Second
	r := receiveV2(t, c, "fifo", "g", 10, inv)
	require.Equal(t, []string{"a0", "b0"}, r.ids(), "first receive: the head of each group")
	assert.Equal(t, "A", r.messages[0].GetSystemProperties().GetMessageGroup())
	assert.Equal(t, rocketmqv2.MessageType_FIFO, r.messages[0].GetSystemProperties().GetMessageType())
	assert.Empty(t, receiveV2(t, c, "fifo", "g", 10, inv).ids(), "received while each group's head is not acknowledged")

	require.Equal(t, []rocketmqv2.Code{rocketmqv2.Code_OK}, ack(t, c, "fifo", "g", handleOf(r.messages[0])))
	r2 := receiveV2(t, c, "fifo", "g", 10, inv)
	require.Equal(t, []string{"a1"}, r2.ids(), "after a0's ack; b0 is still in flight")

	clock.Advance(inv) // a1 and b0 come back, a2 and b1 still wait
	r3 := receiveV2(t, c, "fifo", "g", 10, inv)
	require.Equal(t, []string{"b0", "a1"}, r3.ids(), "after the invisible time: the same heads again")
	for _, m := range r3.messages {
		assert.Equal(t, int32(2), m.GetSystemProperties().GetDeliveryAttempt(), "attempt of %s", m.GetSystemProperties().GetMessageId())
	}
	require.Equal(t, []rocketmqv2.Code{rocketmqv2.Code_OK, rocketmqv2.Code_OK}, ack(t, c, "fifo", "g", handleOf(r3.messages[0]), handleOf(r3.messages[1])))
	r4 := receiveV2(t, c, "fifo", "g", 10, inv)
	require.Equal(t, []string{"a2", "b1"}, r4.ids(), "in queue order")
	require.Equal(t, []rocketmqv2.Code{rocketmqv2.Code_OK, rocketmqv2.Code_OK}, ack(t, c, "fifo", "g", handleOf(r4.messages[0]), handleOf(r4.messages[1])))
	assert.Equal(t, int64(0), groupBacklog(b, "fifo", "g"))
}

// TestRocketMQTimedMessage: a message with a delivery time joins its
// queue at that time; no consumer, on either protocol, sees it before.
func TestRocketMQTimedMessage(t *testing.T) {
	clock := newFakeClock()
	b, c1 := start(t, consumerOpts(broker.WithQueues(1), broker.WithClock(clock.Now))...)
	c := dialV2(t, b.Addr())
	at := clock.Now().Add(time.Hour)
	require.Equal(t, rocketmqv2.Code_OK, v2put(t, c, timedMsg("t", "later", at)))
	require.Equal(t, rocketmqv2.Code_OK, v2put(t, c, v2msg("t", "now")))

	first := receiveV2(t, c, "t", "g", 10, time.Minute)
	require.Equal(t, []string{"now"}, first.ids(), "v2 receive before the delivery time")
	require.Equal(t, []rocketmqv2.Code{rocketmqv2.Code_OK}, ack(t, c, "t", "g", handleOf(first.messages[0])))
	assert.Len(t, receive(t, c1, "t", "v1", 10), 1, "rocketry.v1 receive before the delivery time")
	ms := b.Messages("t")
	require.Len(t, ms, 2)
	assert.Equal(t, "later", ms[1].GetMessage().GetMessageId())
	assert.Equal(t, int64(-1), ms[1].GetOffset(), "offset of a timed message not due")
	assert.Equal(t, int64(0), groupBacklog(b, "t", "g"), "backlog of g: the timed message does not count before it is due")

	clock.Advance(time.Hour - time.Millisecond)
	assert.Empty(t, receiveV2(t, c, "t", "g", 10, time.Minute).ids(), "v2 receive 1 ms before the delivery time")
	clock.Advance(time.Millisecond)
	r := receiveV2(t, c, "t", "g", 10, time.Minute)
	require.Equal(t, []string{"later"}, r.ids(), "v2 receive at the delivery time")
	sp := r.messages[0].GetSystemProperties()
	assert.Equal(t, rocketmqv2.MessageType_DELAY, sp.GetMessageType())
	assert.True(t, sp.GetDeliveryTimestamp().AsTime().Equal(at), "delivery_timestamp %v; want %v", sp.GetDeliveryTimestamp().AsTime(), at)
	got := receive(t, c1, "t", "v1", 10)
	require.Len(t, got, 1, "rocketry.v1 receive at the delivery time")
	assert.Equal(t, "later", got[0].GetMessage().GetMessageId())
	assert.Equal(t, int64(1), b.Messages("t")[1].GetOffset(), "offset of the timed message once due")
}

// TestRocketMQTimedMessageWakesLongPoll: a receive waiting for messages
// gets a timed message when it falls due.
func TestRocketMQTimedMessageWakesLongPoll(t *testing.T) {
	b, _ := start(t, broker.WithQueues(1), broker.WithLongPolling(0, 10*time.Second))
	c := dialV2(t, b.Addr())
	require.Equal(t, rocketmqv2.Code_OK, v2put(t, c, timedMsg("t", "soon", time.Now().Add(50*time.Millisecond))))
	stream, err := c.ReceiveMessage(ctx(t), &rocketmqv2.ReceiveMessageRequest{
		Group: &rocketmqv2.Resource{Name: "g"}, MessageQueue: &rocketmqv2.MessageQueue{Topic: &rocketmqv2.Resource{Name: "t"}},
		BatchSize: 1, InvisibleDuration: durationpb.New(time.Minute), LongPollingTimeout: durationpb.New(5 * time.Second),
	})
	require.NoError(t, err)
	first, err := stream.Recv()
	require.NoError(t, err)
	require.Equal(t, rocketmqv2.Code_OK, first.GetStatus().GetCode(), "first item of the stream")
	m, err := stream.Recv()
	require.NoError(t, err)
	assert.Equal(t, "soon", m.GetMessage().GetSystemProperties().GetMessageId())
	assert.False(t, time.Now().Before(m.GetMessage().GetSystemProperties().GetDeliveryTimestamp().AsTime()), "received before its delivery time")
}

func TestRocketMQTopicType(t *testing.T) {
	b, c1 := start(t, consumerOpts(broker.WithQueues(2), broker.WithTopicType("fifo", broker.TopicFIFO),
		broker.WithTopicType("delay", broker.TopicDelay))...)
	c := dialV2(t, b.Addr())
	for _, q := range route(t, c, "fifo").GetMessageQueues() {
		assert.Equal(t, []rocketmqv2.MessageType{rocketmqv2.MessageType_FIFO}, q.GetAcceptMessageTypes(), "types a FIFO topic's queue accepts")
	}
	assert.Len(t, route(t, c, "mixed").GetMessageQueues()[0].GetAcceptMessageTypes(), 4, "types a topic nobody declared accepts")

	at := time.Now().Add(time.Hour)
	for _, tc := range []struct {
		m    *rocketmqv2.Message
		want rocketmqv2.Code
	}{
		{v2msg("fifo", "n1"), rocketmqv2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
		{fifoMsg("fifo", "f1", "A"), rocketmqv2.Code_OK},
		{timedMsg("fifo", "d1", at), rocketmqv2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
		{timedMsg("delay", "d2", at), rocketmqv2.Code_OK},
		{fifoMsg("delay", "f2", "A"), rocketmqv2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
		{fifoMsg("mixed", "f3", "A"), rocketmqv2.Code_OK},
		{timedMsg("mixed", "d3", at), rocketmqv2.Code_OK},
		{v2msg("mixed", "n3"), rocketmqv2.Code_OK},
	} {
		assert.Equal(t, tc.want, v2put(t, c, tc.m), "send %s to %s", tc.m.GetSystemProperties().GetMessageId(), tc.m.GetTopic().GetName())
	}
	_, err := send(t, c1, msg("fifo", "v1"))
	wantRefusal(t, err, codes.InvalidArgument, rocketryv1.Code_CODE_BAD_REQUEST, 0)
	assert.Len(t, b.Messages("fifo"), 1, "messages stored in the FIFO topic")

	_, err = broker.New(broker.WithTopicType("bad topic", broker.TopicFIFO))
	assert.ErrorContains(t, err, "WithTopicType")
	typ, err := broker.ParseTopicType("fifo")
	require.NoError(t, err)
	assert.Equal(t, broker.TopicFIFO, typ)
	_, err = broker.ParseTopicType("LIFO")
	assert.ErrorContains(t, err, `"LIFO"`)
}

// TestRocketMQConsumerGroupThrottles: a v2 consumer group is a group of
// the store: what it has not acknowledged is backlog, and what it receives
// far behind a queue's head is storage load.
func TestRocketMQConsumerGroupThrottles(t *testing.T) {
	clock := newFakeClock()
	b, _ := start(t, consumerOpts(broker.WithQueues(1), broker.WithClock(clock.Now),
		broker.WithThrottle(broker.Throttle{MaxBacklog: 3, BacklogLowWater: 1, ColdReadDistance: 2}))...)
	c := dialV2(t, b.Addr())
	assert.Empty(t, receiveV2(t, c, "t", "g", 1, time.Minute).ids(), "a receive that makes the group")
	for i := range 4 {
		require.Equal(t, rocketmqv2.Code_OK, v2put(t, c, v2msg("t", fmt.Sprintf("m%d", i))))
	}
	assert.Equal(t, rocketmqv2.Code_TOO_MANY_REQUESTS, v2put(t, c, v2msg("t", "m4")), "send over the backlog of g")

	r := receiveV2(t, c, "t", "g", 3, time.Minute)
	require.Len(t, r.messages, 3)
	assert.Equal(t, int64(4), groupBacklog(b, "t", "g"), "backlog counts received messages until acknowledged")
	assert.Equal(t, rocketmqv2.Code_TOO_MANY_REQUESTS, v2put(t, c, v2msg("t", "m4")), "send while received messages are not acknowledged")
	handles := []string{handleOf(r.messages[0]), handleOf(r.messages[1]), handleOf(r.messages[2])}
	require.Equal(t, []rocketmqv2.Code{rocketmqv2.Code_OK, rocketmqv2.Code_OK, rocketmqv2.Code_OK}, ack(t, c, "t", "g", handles...))
	assert.Equal(t, int64(1), groupBacklog(b, "t", "g"))
	assert.Equal(t, rocketmqv2.Code_OK, v2put(t, c, v2msg("t", "m4")), "send once acknowledged down to the low-water mark")

	// m0 was 3 behind the head of 4 when received: more than 2, cold.
	assert.Positive(t, b.Stats().GetStorageLoad(), "storage load after a read far behind the head")
}

func TestRocketMQReceiveRefusals(t *testing.T) {
	b, _ := start(t, broker.WithLongPolling(time.Second, 2*time.Second))
	c := dialV2(t, b.Addr())
	base := func() *rocketmqv2.ReceiveMessageRequest {
		return &rocketmqv2.ReceiveMessageRequest{
			Group: &rocketmqv2.Resource{Name: "g"}, MessageQueue: &rocketmqv2.MessageQueue{Topic: &rocketmqv2.Resource{Name: "t"}},
			BatchSize: 1, InvisibleDuration: durationpb.New(time.Minute), LongPollingTimeout: durationpb.New(time.Second),
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*rocketmqv2.ReceiveMessageRequest)
		want   rocketmqv2.Code
	}{
		{"invisible under 10 s", func(r *rocketmqv2.ReceiveMessageRequest) { r.InvisibleDuration = durationpb.New(9 * time.Second) }, rocketmqv2.Code_ILLEGAL_INVISIBLE_TIME},
		{"invisible over 12 h", func(r *rocketmqv2.ReceiveMessageRequest) { r.InvisibleDuration = durationpb.New(13 * time.Hour) }, rocketmqv2.Code_ILLEGAL_INVISIBLE_TIME},
		{"bad group", func(r *rocketmqv2.ReceiveMessageRequest) { r.Group.Name = "a b" }, rocketmqv2.Code_ILLEGAL_CONSUMER_GROUP},
		{"bad topic", func(r *rocketmqv2.ReceiveMessageRequest) { r.MessageQueue.Topic.Name = "" }, rocketmqv2.Code_ILLEGAL_TOPIC},
		{"SQL filter", func(r *rocketmqv2.ReceiveMessageRequest) {
			r.FilterExpression = &rocketmqv2.FilterExpression{Type: rocketmqv2.FilterType_SQL, Expression: "a > 1"}
		}, rocketmqv2.Code_ILLEGAL_FILTER_EXPRESSION},
		{"batch 0", func(r *rocketmqv2.ReceiveMessageRequest) { r.BatchSize = 0 }, rocketmqv2.Code_BAD_REQUEST},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := base()
			tc.change(req)
			stream, err := c.ReceiveMessage(ctx(t), req)
			require.NoError(t, err)
			resp, err := stream.Recv()
			require.NoError(t, err)
			assert.Equal(t, tc.want, resp.GetStatus().GetCode(), "status: %s", resp.GetStatus().GetMessage())
			last, err := stream.Recv()
			require.NoError(t, err)
			assert.NotNil(t, last.GetDeliveryTimestamp(), "last item: the delivery timestamp")
		})
	}
}

// TestRocketMQReceiveDeadlineTooShort: a receive whose deadline leaves
// less than the least long polling time is refused, as the proxy does:
// 40018 ILLEGAL_POLLING_TIME for a client of version 5.0.3 or later (by
// Java's string order), 40000 BAD_REQUEST for an older one or one that
// does not say (ReceiveMessageActivity): the official Go client 5.1.2
// says "5.0.1-rc1", the Node.js client its own version.
func TestRocketMQReceiveDeadlineTooShort(t *testing.T) {
	b, _ := start(t, broker.WithLongPolling(5*time.Second, 20*time.Second))
	c := dialV2(t, b.Addr())
	for _, tc := range []struct {
		version string // "": no header
		want    rocketmqv2.Code
	}{
		{"", rocketmqv2.Code_BAD_REQUEST},
		{"5.0.1-rc1", rocketmqv2.Code_BAD_REQUEST},
		{"1.0.8", rocketmqv2.Code_BAD_REQUEST},
		{"5.0.3", rocketmqv2.Code_ILLEGAL_POLLING_TIME},
		{"5.0.7", rocketmqv2.Code_ILLEGAL_POLLING_TIME},
		{"5.1.0", rocketmqv2.Code_ILLEGAL_POLLING_TIME},
	} {
		t.Run("version "+tc.version, func(t *testing.T) {
			call := ctx(t)
			if tc.version != "" {
				call = metadata.AppendToOutgoingContext(call, "x-mq-client-version", tc.version)
			}
			short, cancel := context.WithTimeout(call, 2*time.Second)
			defer cancel()
			stream, err := c.ReceiveMessage(short, &rocketmqv2.ReceiveMessageRequest{
				Group: &rocketmqv2.Resource{Name: "g"}, MessageQueue: &rocketmqv2.MessageQueue{Topic: &rocketmqv2.Resource{Name: "t"}},
				BatchSize: 1, InvisibleDuration: durationpb.New(time.Minute), LongPollingTimeout: durationpb.New(10 * time.Second),
			})
			require.NoError(t, err)
			resp, err := stream.Recv()
			require.NoError(t, err)
			assert.Equal(t, tc.want, resp.GetStatus().GetCode(), "status: %s", resp.GetStatus().GetMessage())
		})
	}
}

// TestRocketMQSimpleConsumerSession: a SimpleConsumer's Settings on
// Telemetry and its heartbeats are answered.
func TestRocketMQSimpleConsumerSession(t *testing.T) {
	b, _ := start(t)
	c := dialV2(t, b.Addr())
	stream, err := c.Telemetry(ctx(t))
	require.NoError(t, err)
	simple := rocketmqv2.ClientType_SIMPLE_CONSUMER
	group := &rocketmqv2.Resource{Name: "g"}
	require.NoError(t, stream.Send(&rocketmqv2.TelemetryCommand{Command: &rocketmqv2.TelemetryCommand_Settings{Settings: &rocketmqv2.Settings{
		ClientType: &simple,
		PubSub: &rocketmqv2.Settings_Subscription{Subscription: &rocketmqv2.Subscription{
			Group:         group,
			Subscriptions: []*rocketmqv2.SubscriptionEntry{{Topic: &rocketmqv2.Resource{Name: "t"}, Expression: &rocketmqv2.FilterExpression{Type: rocketmqv2.FilterType_TAG, Expression: "*"}}},
		}},
	}}}))
	got, err := stream.Recv()
	require.NoError(t, err)
	assert.Equal(t, rocketmqv2.Code_OK, got.GetStatus().GetCode())
	assert.Equal(t, "g", got.GetSettings().GetSubscription().GetGroup().GetName(), "subscription group in the broker's Settings")
	require.NoError(t, stream.CloseSend())
	_, err = stream.Recv()
	assert.Equal(t, io.EOF, err)

	hb, err := c.Heartbeat(ctx(t), &rocketmqv2.HeartbeatRequest{Group: group, ClientType: simple})
	require.NoError(t, err)
	assert.Equal(t, rocketmqv2.Code_OK, hb.GetStatus().GetCode())
}

// TestRocketMQStopEndsLongPoll: Stop ends a receive waiting for messages
// with UNAVAILABLE, and leaves no goroutine (TestMain's goleak).
func TestRocketMQStopEndsLongPoll(t *testing.T) {
	b, err := broker.New(broker.WithLongPolling(0, time.Minute))
	require.NoError(t, err)
	require.NoError(t, b.Start("127.0.0.1:0"))
	defer b.Stop()
	c := dialV2(t, b.Addr())
	stream, err := c.ReceiveMessage(ctx(t), &rocketmqv2.ReceiveMessageRequest{
		Group: &rocketmqv2.Resource{Name: "g"}, MessageQueue: &rocketmqv2.MessageQueue{Topic: &rocketmqv2.Resource{Name: "t"}},
		BatchSize: 1, InvisibleDuration: durationpb.New(time.Minute), LongPollingTimeout: durationpb.New(time.Minute),
	})
	require.NoError(t, err)
	// The topic exists once the receive is waiting on it.
	require.Eventually(t, func() bool { return len(b.Stats().GetTopics()) == 1 }, 5*time.Second, time.Millisecond)
	b.Stop()
	_, err = stream.Recv()
	assert.Equal(t, codes.Unavailable, status.Code(err), "receive after Stop: %v", err)
}
