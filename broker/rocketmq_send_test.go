package broker_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

const (
	v2OK      = rocketmqv2.Code_OK
	v2TooMany = rocketmqv2.Code_TOO_MANY_REQUESTS
	v2Intern  = rocketmqv2.Code_INTERNAL_SERVER_ERROR
)

// queuesOf is the queue of each stored message of topic, by id.
func queuesOf(b *broker.Broker, topic string) map[string]int32 {
	out := map[string]int32{}
	for _, m := range b.Messages(topic) {
		out[m.Message.MessageId] = m.QueueId
	}
	return out
}

// TestRocketMQSendOneEntryPerBatch: a request of several messages is
// answered with one entry, its id the ids joined by commas, and stored on
// one queue; the broker picks the queue, in turn per request, whatever
// queue_id the client asks for.
func TestRocketMQSendOneEntryPerBatch(t *testing.T) {
	b, c1 := start(t, broker.WithQueues(2))
	c := dialV2(t, b.Addr())
	a, bm, cm := v2msg("t", "a"), v2msg("t", "b"), v2msg("t", "c")
	for _, m := range []*rocketmqv2.Message{a, bm, cm} {
		m.SystemProperties.QueueId = 1 // ignored
	}
	batch := v2send(t, c, a, bm, cm)
	assert.Equal(t, []rocketmqv2.Code{v2OK, v2OK}, v2codes(batch))
	e := batch.Entries[0]
	assert.Equal(t, "a,b,c", e.MessageId)
	assert.Equal(t, int64(0), e.Offset)
	assert.Equal(t, "OK", e.Status.Message)
	single := v2send(t, c, v2msg("t", "d")).Entries[0]
	assert.Equal(t, "d", single.MessageId)
	assert.Equal(t, int64(0), single.Offset, "the next request goes to the next queue")
	assert.Equal(t, map[string]int32{"a": 0, "b": 0, "c": 0, "d": 1}, queuesOf(b, "t"))
	assert.Equal(t, int64(2), b.Stats().SendRequests)

	local := brokertest.Start(t, broker.WithProxyMode(broker.ProxyLocal))
	id := v2send(t, dialV2(t, local.Addr()), v2msg("t", "a"), v2msg("t", "b")).Entries[0].MessageId
	assert.Len(t, id, 32, "local mode: a new id for the batch, not %q", id)
	assert.NotContains(t, id, ",")

	// What v2 stored is readable through rocketry.v1, with its fields.
	tag := "tag-a"
	m := v2msg("f", "x")
	m.SystemProperties.Tag = &tag
	m.SystemProperties.Keys = []string{"k1", "k2"}
	m.UserProperties = map[string]string{"p": "v"}
	v2send(t, c, m)
	got := receive(t, c1, "f", "g", 10)
	require.Len(t, got, 1)
	assert.Equal(t, "tag-a", got[0].Message.Tag)
	assert.Equal(t, []string{"k1", "k2"}, got[0].Message.Keys)
	assert.Equal(t, map[string]string{"p": "v"}, got[0].Message.Properties)
	assert.Equal(t, []byte("body of x"), got[0].Message.Body)
}

// TestRocketMQSendBatchProperties: the messages of a request of several
// are stored as a RocketMQ 5 broker stores a proxy's batch: each reads the
// first message's tag, keys and user properties over its own, keeps its
// own ID and body; a first message without a tag leaves the others' tags.
func TestRocketMQSendBatchProperties(t *testing.T) {
	b := brokertest.Start(t)
	c := dialV2(t, b.Addr())
	with := func(id, tag string, keys []string, props map[string]string) *rocketmqv2.Message {
		m := v2msg("t", id)
		if tag != "" {
			m.SystemProperties.Tag = &tag
		}
		m.SystemProperties.Keys = keys
		m.UserProperties = props
		return m
	}
	v2send(t, c,
		with("a", "tag-a", []string{"ka"}, map[string]string{"p": "a", "only-a": "1"}),
		with("b", "tag-b", []string{"kb"}, map[string]string{"p": "b", "only-b": "2"}))
	v2send(t, c, with("c", "", nil, nil), with("d", "tag-d", []string{"kd"}, map[string]string{"p": "d"}))
	got := map[string]*rocketryv1.ReceivedMessage{}
	for _, m := range b.Messages("t") {
		got[m.Message.MessageId] = m
	}
	require.Len(t, got, 4)
	second := got["b"].Message
	assert.Equal(t, "tag-a", second.Tag)
	assert.Equal(t, []string{"ka"}, second.Keys)
	assert.Equal(t, map[string]string{"p": "a", "only-a": "1", "only-b": "2"}, second.Properties)
	assert.Equal(t, []byte("body of b"), second.Body)
	assert.Equal(t, "tag-a", got["a"].Message.Tag, "the first is stored as sent")
	assert.Equal(t, map[string]string{"p": "a", "only-a": "1"}, got["a"].Message.Properties)
	assert.Equal(t, "tag-d", got["d"].Message.Tag, "a first message without a tag, keys or properties changes nothing")
	assert.Equal(t, []string{"kd"}, got["d"].Message.Keys)
	assert.Equal(t, map[string]string{"p": "d"}, got["d"].Message.Properties)
}

// TestRocketMQSendGroupQueue: a single message with a message group goes
// to the queue the proxy's hash picks, every time; a batch ignores groups.
func TestRocketMQSendGroupQueue(t *testing.T) {
	b := brokertest.Start(t, broker.WithQueues(8))
	c := dialV2(t, b.Addr())
	grouped := func(id, group string) *rocketmqv2.Message {
		m := v2msg("t", id)
		m.SystemProperties.MessageGroup = &group
		return m
	}
	for _, id := range []string{"a1", "a2", "a3"} {
		v2send(t, c, grouped(id, "order-42"))
		v2send(t, c, v2msg("t", "filler-"+id)) // moves the round robin
	}
	qs := queuesOf(b, "t")
	assert.Equal(t, qs["a1"], qs["a2"])
	assert.Equal(t, qs["a1"], qs["a3"])
	seen := map[int32]bool{}
	for g := range 32 {
		id := "g" + string(rune('a'+g))
		v2send(t, c, grouped(id, id))
		seen[queuesOf(b, "t")[id]] = true
	}
	assert.Greater(t, len(seen), 4, "32 groups spread over the 8 queues")
}

// TestRocketMQSendStoresCopies: without deduplication a message sent
// twice is stored twice, and Stats and the metrics count the copies;
// WithRocketMQDedup answers the repeat as stored instead.
func TestRocketMQSendStoresCopies(t *testing.T) {
	b := brokertest.Start(t, broker.WithQueues(1))
	c := dialV2(t, b.Addr())
	assert.Equal(t, int64(0), v2send(t, c, v2msg("t", "a")).Entries[0].Offset)
	assert.Equal(t, int64(1), v2send(t, c, v2msg("t", "a")).Entries[0].Offset, "stored again")
	v2send(t, c, v2msg("t", "a"), v2msg("t", "b"))
	s := b.Stats()
	assert.Equal(t, int64(4), s.Stored)
	assert.Equal(t, int64(2), s.Copies)
	assert.Equal(t, int64(1), s.StoredTwice)
	assert.Equal(t, int64(0), s.Duplicates)
	assert.Equal(t, int64(2), s.Topics[0].Copies)
	var sb strings.Builder
	require.NoError(t, b.WriteMetrics(&sb))
	assert.Contains(t, sb.String(), "\nrocketry_broker_copies_stored_total 2\n")
	assert.Contains(t, sb.String(), "\nrocketry_broker_ids_stored_twice 1\n")

	d := brokertest.Start(t, broker.WithQueues(1), broker.WithRocketMQDedup(true))
	c = dialV2(t, d.Addr())
	v2send(t, c, v2msg("t", "a"))
	again := v2send(t, c, v2msg("t", "a"))
	assert.Equal(t, []rocketmqv2.Code{v2OK, v2OK}, v2codes(again))
	assert.Equal(t, int64(0), again.Entries[0].Offset, "the original's offset")
	s = d.Stats()
	assert.Equal(t, []int64{1, 1, 0, 0}, []int64{s.Stored, s.Duplicates, s.Copies, s.StoredTwice})
}

// TestV1AndV2ShareOneStore: one listener, one store; rocketry.v1
// deduplicates against what either face stored.
func TestV1AndV2ShareOneStore(t *testing.T) {
	b, c1 := start(t, broker.WithQueues(1))
	c2 := dialV2(t, b.Addr())
	mustSend(t, c1, msg("t", "x"))
	v2send(t, c2, v2msg("t", "x"), v2msg("t", "y")) // x stored again
	r := mustSend(t, c1, msg("t", "y")).Results[0]
	assert.True(t, r.Duplicate, "v1 re-send of a v2 id is a duplicate")
	assert.Equal(t, int64(2), r.Offset)
	assert.Len(t, b.Messages("t"), 3)
	s := b.Stats()
	assert.Equal(t, []int64{3, 1, 1, 1}, []int64{s.SendRequests, s.Duplicates, s.Copies, s.StoredTwice})
	assert.Equal(t, int64(2), b.SendRequests(broker.ProtocolRocketryV1))
	assert.Equal(t, int64(1), b.SendRequests(broker.ProtocolRocketMQV2))
}

func TestRocketMQSendThrottled(t *testing.T) {
	for _, mode := range []broker.ProxyMode{broker.ProxyCluster, broker.ProxyLocal} {
		want := map[broker.ProxyMode]rocketmqv2.Code{broker.ProxyCluster: v2TooMany, broker.ProxyLocal: v2Intern}[mode]
		t.Run("BACKLOG/"+mode.String(), func(t *testing.T) {
			b, c1 := start(t, broker.WithQueues(1), broker.WithThrottle(broker.Throttle{MaxBacklog: 5}), broker.WithProxyMode(mode))
			c := dialV2(t, b.Addr())
			receive(t, c1, "t", "g", 1) // a group at offset 0
			fill(t, c1, "t", "m", 6)    // backlog 6 > 5
			resp := v2send(t, c, v2msg("t", "a"), v2msg("t", "b"))
			assert.Equal(t, []rocketmqv2.Code{want}, v2codes(resp))
			assert.True(t, strings.HasPrefix(resp.Status.Message, "[BACKLOG]broker busy, backlog of topic "), "status message %q", resp.Status.Message)
			assert.NotContains(t, resp.Status.Message, "retry in")
			assert.Equal(t, int64(6), b.Stats().Stored, "nothing stored")
			assert.Equal(t, int64(1), b.Stats().Throttled["BACKLOG"])
		})
	}
	t.Run("STORAGE_LOAD", func(t *testing.T) {
		clock := newFakeClock()
		b, c1 := start(t, broker.WithQueues(1), broker.WithClock(clock.Now),
			broker.WithThrottle(broker.Throttle{ColdReadDistance: 1, MaxStorageLoad: 1}))
		c := dialV2(t, b.Addr())
		fill(t, c1, "t", "m", 10)
		receive(t, c1, "t", "replay", 5) // 5 cold reads in the window
		resp := v2send(t, c, v2msg("t", "a"))
		assert.Equal(t, []rocketmqv2.Code{v2TooMany}, v2codes(resp))
		assert.True(t, strings.HasPrefix(resp.Status.Message, "[STORAGE_LOAD]broker busy, "), "status message %q", resp.Status.Message)
		clock.Advance(2 * time.Second)
		assert.Equal(t, []rocketmqv2.Code{v2OK, v2OK}, v2codes(v2send(t, c, v2msg("t", "a"))))
		assert.Equal(t, int64(1), b.Stats().Throttled["STORAGE_LOAD"])
	})
}

func TestRocketMQSendFaults(t *testing.T) {
	b := brokertest.Start(t, broker.WithFaults(broker.Faults{InternalRate: 1}))
	c := dialV2(t, b.Addr())
	resp := v2send(t, c, v2msg("t", "a"), v2msg("t", "b"))
	assert.Equal(t, []rocketmqv2.Code{v2Intern}, v2codes(resp))
	assert.Contains(t, resp.Status.Message, "nothing stored")
	assert.Empty(t, b.Messages("t"), "an injected INTERNAL stores nothing")

	require.NoError(t, b.SetFaults(broker.Faults{Unavailable: true}))
	_, err := c.SendMessage(ctx(t), &rocketmqv2.SendMessageRequest{Messages: []*rocketmqv2.Message{v2msg("t", "a")}})
	assert.Equal(t, codes.Unavailable, status.Code(err), "UNAVAILABLE fault: %v", err)

	require.NoError(t, b.SetFaults(broker.Faults{Latency: 500 * time.Millisecond}))
	short, cancel := context.WithTimeout(ctx(t), 100*time.Millisecond)
	defer cancel()
	_, err = c.SendMessage(short, &rocketmqv2.SendMessageRequest{Messages: []*rocketmqv2.Message{v2msg("t", "a")}})
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "deadline within the latency: %v", err)
	// The client's deadline may end before the broker has counted the
	// request (a loaded machine): wait for the count, not for a time.
	require.Eventually(t, func() bool { return b.Stats().Faults["latency"] == 1 }, 10*time.Second, time.Millisecond, "the latency fault counted")

	require.NoError(t, b.SetFaults(broker.Faults{DropRate: 1}))
	_, err = c.SendMessage(ctx(t), &rocketmqv2.SendMessageRequest{Messages: []*rocketmqv2.Message{v2msg("t", "a")}})
	assert.Equal(t, codes.Unavailable, status.Code(err), "drop fault: %v", err)
	assert.Empty(t, b.Messages("t"))
	s := b.Stats()
	assert.Equal(t, map[string]int64{"internal": 1, "unavailable": 1, "latency": 1, "blackhole": 0, "drop": 1, "stored_internal": 0}, s.Faults)
}

// TestSendObserver: one record per message per request, on both faces.
func TestSendObserver(t *testing.T) {
	clock := newFakeClock()
	var (
		mu   sync.Mutex
		recs []broker.SendRecord
	)
	b, c1 := start(t, broker.WithQueues(1), broker.WithClock(clock.Now), broker.WithMaxBodyBytes(10),
		broker.WithThrottle(broker.Throttle{MaxSendRate: 4}),
		broker.WithSendObserver(func(r broker.SendRecord) {
			mu.Lock()
			defer mu.Unlock()
			recs = append(recs, r)
		}))
	c2 := dialV2(t, b.Addr())
	big := v2msg("t", "big")
	big.Body = make([]byte, 11)
	mustSend(t, c1, msg("t", "a"), msg("t", "b"))
	clock.Advance(time.Millisecond)
	v2send(t, c2, v2msg("t", "a"))                  // a copy
	v2send(t, c2, v2msg("t", "x"), big)             // a bad request: both refused
	v2send(t, c2, v2msg("t", "c"), v2msg("t", "d")) // over the rate
	mustSend(t, c1, msg("t", "a"))                  // rocketry.v1 deduplicates
	require.NoError(t, b.SetFaults(broker.Faults{InternalRate: 1}))
	_, err := send(t, c1, msg("t", "e"))
	require.Error(t, err)

	v1, v2 := broker.ProtocolRocketryV1, broker.ProtocolRocketMQV2
	t0 := newFakeClock().Now()
	t1 := t0.Add(time.Millisecond)
	want := []broker.SendRecord{
		{Protocol: v1, MessageID: "a", Topic: "t", Time: t0, Result: broker.SendStored},
		{Protocol: v1, MessageID: "b", Topic: "t", Time: t0, Result: broker.SendStored},
		{Protocol: v2, MessageID: "a", Topic: "t", Time: t1, Result: broker.SendStored},
		{Protocol: v2, MessageID: "x", Topic: "t", Time: t1, Result: broker.SendBadRequest, Reason: "MESSAGE_TOO_LARGE"},
		{Protocol: v2, MessageID: "big", Topic: "t", Time: t1, Result: broker.SendBadRequest, Reason: "MESSAGE_TOO_LARGE"},
		{Protocol: v2, MessageID: "c", Topic: "t", Time: t1, Result: broker.SendThrottled, Reason: "SEND_RATE"},
		{Protocol: v2, MessageID: "d", Topic: "t", Time: t1, Result: broker.SendThrottled, Reason: "SEND_RATE"},
		{Protocol: v1, MessageID: "a", Topic: "t", Time: t1, Result: broker.SendDuplicate},
		{Protocol: v1, MessageID: "e", Topic: "t", Time: t1, Result: broker.SendFault, Reason: "internal"},
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, want, recs)
}
