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
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/apache/rocketmq/v2"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

const (
	v2OK       = rocketmqv2.Code_OK
	v2Multiple = rocketmqv2.Code_MULTIPLE_RESULTS
	v2TooMany  = rocketmqv2.Code_TOO_MANY_REQUESTS
)

func TestRocketMQSendStoresAndDedupes(t *testing.T) {
	b, c1 := start(t, broker.WithQueues(2))
	c := dialV2(t, b.Addr())
	m := v2msg("t", "a")
	tag := "tag-a"
	m.SystemProperties.Tag = &tag
	m.SystemProperties.Keys = []string{"k1", "k2"}
	m.SystemProperties.QueueId = 1
	m.UserProperties = map[string]string{"p": "v"}
	first := v2send(t, c, m)
	assert.Equal(t, []rocketmqv2.Code{v2OK, v2OK}, v2codes(first))
	e := first.Entries[0]
	assert.Equal(t, "a", e.MessageId)
	assert.Equal(t, int64(0), e.Offset)
	assert.Contains(t, e.Status.Message, "queue 1 at offset 0")

	// A re-send of a stored id answers OK with the original offset.
	v2send(t, c, v2msg("t", "b"), v2msg("t", "c")) // queue 0, offsets 0 and 1
	again := v2send(t, c, v2msg("t", "c"))
	assert.Equal(t, []rocketmqv2.Code{v2OK, v2OK}, v2codes(again))
	assert.Equal(t, int64(1), again.Entries[0].Offset)
	assert.Contains(t, again.Entries[0].Status.Message, "duplicate")

	// What v2 stored is readable through rocketry.v1, with its fields.
	got := receive(t, c1, "t", "g", 10)
	require.Len(t, got, 3)
	var a *rocketryv1.Message
	for _, r := range got {
		if r.Message.MessageId == "a" {
			a = r.Message
			assert.Equal(t, int32(1), r.QueueId)
		}
	}
	require.NotNil(t, a)
	assert.Equal(t, "tag-a", a.Tag)
	assert.Equal(t, []string{"k1", "k2"}, a.Keys)
	assert.Equal(t, map[string]string{"p": "v"}, a.Properties)
	assert.Equal(t, []byte("body of a"), a.Body)
	s := b.Stats()
	assert.Equal(t, int64(3), s.Stored)
	assert.Equal(t, int64(1), s.Duplicates)
	assert.Equal(t, int64(3), s.SendRequests)
	assert.Equal(t, int64(3), b.SendRequests(broker.ProtocolRocketMQV2))
	assert.Equal(t, int64(0), b.SendRequests(broker.ProtocolRocketryV1))
}

// TestV1AndV2ShareOneStore: one listener, one store, one dedup window.
func TestV1AndV2ShareOneStore(t *testing.T) {
	b, c1 := start(t, broker.WithQueues(1))
	c2 := dialV2(t, b.Addr())
	v1 := mustSend(t, c1, msg("t", "x")).Results[0]
	dup := v2send(t, c2, v2msg("t", "x"), v2msg("t", "y"))
	assert.Equal(t, []rocketmqv2.Code{v2OK, v2OK, v2OK}, v2codes(dup))
	assert.Equal(t, v1.Offset, dup.Entries[0].Offset, "v2 re-send of a v1 id: the original's offset")
	assert.Equal(t, int64(1), dup.Entries[1].Offset)
	r := mustSend(t, c1, msg("t", "y")).Results[0]
	assert.True(t, r.Duplicate, "v1 re-send of a v2 id is a duplicate")
	assert.Equal(t, int64(1), r.Offset)
	assert.Len(t, b.Messages("t"), 2)
	s := b.Stats()
	assert.Equal(t, int64(3), s.SendRequests)
	assert.Equal(t, int64(2), s.Duplicates)
	assert.Equal(t, int64(2), b.SendRequests(broker.ProtocolRocketryV1))
	assert.Equal(t, int64(1), b.SendRequests(broker.ProtocolRocketMQV2))
}

func TestRocketMQSendThrottled(t *testing.T) {
	t.Run("BACKLOG", func(t *testing.T) {
		b, c1 := start(t, broker.WithQueues(1), broker.WithThrottle(broker.Throttle{MaxBacklog: 5}))
		c := dialV2(t, b.Addr())
		receive(t, c1, "t", "g", 1) // a group at offset 0
		fill(t, c1, "t", "m", 6)    // backlog 6 > 5
		resp := v2send(t, c, v2msg("t", "a"), v2msg("t", "b"))
		assert.Equal(t, []rocketmqv2.Code{v2TooMany, v2TooMany, v2TooMany}, v2codes(resp))
		assert.True(t, strings.HasPrefix(resp.Status.Message, "BACKLOG: "), "status message %q", resp.Status.Message)
		assert.Contains(t, resp.Entries[0].Status.Message, "retry in ")
		assert.Equal(t, int64(6), b.Stats().Stored, "nothing stored")
		assert.Equal(t, int64(1), b.Stats().Throttled["BACKLOG"])
	})
	t.Run("STORAGE_LOAD", func(t *testing.T) {
		clock := newFakeClock()
		b, c1 := start(t, broker.WithQueues(1), broker.WithClock(clock.Now),
			broker.WithThrottle(broker.Throttle{ColdReadDistance: 1, MaxStorageLoad: 1}))
		c := dialV2(t, b.Addr())
		fill(t, c1, "t", "m", 10)
		receive(t, c1, "t", "replay", 5) // 5 cold reads in the window
		resp := v2send(t, c, v2msg("t", "a"))
		assert.Equal(t, []rocketmqv2.Code{v2TooMany, v2TooMany}, v2codes(resp))
		assert.True(t, strings.HasPrefix(resp.Entries[0].Status.Message, "STORAGE_LOAD: "), "entry message %q", resp.Entries[0].Status.Message)
		clock.Advance(2 * time.Second)
		assert.Equal(t, []rocketmqv2.Code{v2OK, v2OK}, v2codes(v2send(t, c, v2msg("t", "a"))))
		assert.Equal(t, int64(1), b.Stats().Throttled["STORAGE_LOAD"])
	})
}

func TestRocketMQSendFaults(t *testing.T) {
	b := brokertest.Start(t, broker.WithFaults(broker.Faults{InternalRate: 1}))
	c := dialV2(t, b.Addr())
	resp := v2send(t, c, v2msg("t", "a"), v2msg("t", "b"))
	assert.Equal(t, []rocketmqv2.Code{rocketmqv2.Code_INTERNAL_SERVER_ERROR, rocketmqv2.Code_INTERNAL_SERVER_ERROR,
		rocketmqv2.Code_INTERNAL_SERVER_ERROR}, v2codes(resp))
	assert.Contains(t, resp.Status.Message, "nothing stored")
	assert.Empty(t, b.Messages("t"), "an injected INTERNAL stores nothing")

	require.NoError(t, b.SetFaults(broker.Faults{Unavailable: true}))
	_, err := c.SendMessage(ctx(t), &rocketmqv2.SendMessageRequest{Messages: []*rocketmqv2.Message{v2msg("t", "a")}})
	assert.Equal(t, codes.Unavailable, status.Code(err), "UNAVAILABLE fault: %v", err)

	require.NoError(t, b.SetFaults(broker.Faults{Latency: 20 * time.Millisecond}))
	short, cancel := context.WithTimeout(ctx(t), 5*time.Millisecond)
	defer cancel()
	_, err = c.SendMessage(short, &rocketmqv2.SendMessageRequest{Messages: []*rocketmqv2.Message{v2msg("t", "a")}})
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "deadline within the latency: %v", err)

	require.NoError(t, b.SetFaults(broker.Faults{DropRate: 1}))
	_, err = c.SendMessage(ctx(t), &rocketmqv2.SendMessageRequest{Messages: []*rocketmqv2.Message{v2msg("t", "a")}})
	assert.Equal(t, codes.Unavailable, status.Code(err), "drop fault: %v", err)
	assert.Empty(t, b.Messages("t"))
	s := b.Stats()
	assert.Equal(t, map[string]int64{"internal": 1, "unavailable": 1, "latency": 1, "blackhole": 0, "drop": 1}, s.Faults)
}

func TestRocketMQSendValidation(t *testing.T) {
	b := brokertest.Start(t, broker.WithMaxBodyBytes(10), broker.WithMaxBatch(3), broker.WithQueues(2),
		broker.WithAutoCreateTopics(false), broker.WithTopics("t"))
	c := dialV2(t, b.Addr())
	big := v2msg("t", "big")
	big.Body = make([]byte, 11)
	noProps := v2msg("t", "x")
	noProps.SystemProperties = nil
	badQueue := v2msg("t", "q")
	badQueue.SystemProperties.QueueId = 2
	badProp := v2msg("t", "p")
	badProp.UserProperties = map[string]string{"": "v"}
	for _, tc := range []struct {
		name string
		m    *rocketmqv2.Message
		want rocketmqv2.Code
	}{
		{"empty message id", v2msg("t", ""), rocketmqv2.Code_ILLEGAL_MESSAGE_ID},
		{"no system properties", noProps, rocketmqv2.Code_ILLEGAL_MESSAGE_ID},
		{"topic with space", v2msg("a b", "a"), rocketmqv2.Code_ILLEGAL_TOPIC},
		{"empty topic", v2msg("", "a"), rocketmqv2.Code_ILLEGAL_TOPIC},
		{"body too large", big, rocketmqv2.Code_MESSAGE_BODY_TOO_LARGE},
		{"unknown topic", v2msg("unknown", "a"), rocketmqv2.Code_TOPIC_NOT_FOUND},
		{"queue outside the route", badQueue, rocketmqv2.Code_BAD_REQUEST},
		{"property without a name", badProp, rocketmqv2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := v2send(t, c, tc.m)
			assert.Equal(t, []rocketmqv2.Code{tc.want, tc.want}, v2codes(resp))
			assert.NotEmpty(t, resp.Entries[0].Status.Message)
		})
	}
	// The request as a whole.
	resp, err := c.SendMessage(ctx(t), &rocketmqv2.SendMessageRequest{})
	require.NoError(t, err)
	assert.Equal(t, rocketmqv2.Code_BAD_REQUEST, resp.Status.GetCode(), "no messages")
	many := v2send(t, c, v2msg("t", "1"), v2msg("t", "2"), v2msg("t", "3"), v2msg("t", "4"))
	assert.Equal(t, rocketmqv2.Code_BAD_REQUEST, many.Status.GetCode(), "over WithMaxBatch")
	assert.Contains(t, many.Entries[3].Status.Message, "the most is 3")
	assert.Empty(t, b.Messages("t"))
	assert.Equal(t, int64(10), b.Stats().BadRequests)
}

func TestRocketMQBatchPerEntryStatus(t *testing.T) {
	b := brokertest.Start(t, broker.WithMaxBodyBytes(10), broker.WithQueues(1))
	c := dialV2(t, b.Addr())
	big := v2msg("t", "big")
	big.Body = make([]byte, 11)
	mixed := v2send(t, c, v2msg("t", "a"), big, v2msg("t", ""), v2msg("u", "b"), v2msg("t", "c"))
	assert.Equal(t, []rocketmqv2.Code{v2Multiple, v2OK, rocketmqv2.Code_MESSAGE_BODY_TOO_LARGE,
		rocketmqv2.Code_ILLEGAL_MESSAGE_ID, rocketmqv2.Code_BAD_REQUEST, v2OK}, v2codes(mixed))
	assert.Equal(t, []int64{0, 1}, []int64{mixed.Entries[0].Offset, mixed.Entries[4].Offset})
	assert.Contains(t, mixed.Entries[3].Status.Message, "differs")

	all := v2send(t, c, v2msg("t", "a"), v2msg("t", "d"))
	assert.Equal(t, []rocketmqv2.Code{v2OK, v2OK, v2OK}, v2codes(all), "a duplicate and a new message")

	bad := v2send(t, c, v2msg("t", ""), v2msg("t", ""))
	assert.Equal(t, []rocketmqv2.Code{rocketmqv2.Code_ILLEGAL_MESSAGE_ID, rocketmqv2.Code_ILLEGAL_MESSAGE_ID,
		rocketmqv2.Code_ILLEGAL_MESSAGE_ID}, v2codes(bad), "all refused alike: their common code")

	// Throttled: the valid messages share the refusal, the invalid keep theirs.
	require.NoError(t, b.SetThrottle(broker.Throttle{MaxSendRate: 1}))
	v2send(t, c, v2msg("t", "e")) // takes the one token
	throttled := v2send(t, c, v2msg("t", "f"), big)
	assert.Equal(t, []rocketmqv2.Code{v2Multiple, v2TooMany, rocketmqv2.Code_MESSAGE_BODY_TOO_LARGE}, v2codes(throttled))
	assert.True(t, strings.HasPrefix(throttled.Entries[0].Status.Message, "SEND_RATE: "))
	assert.Len(t, b.Messages("t"), 4)
}

// TestSendObserver: one record per message per request, on both faces.
func TestSendObserver(t *testing.T) {
	clock := newFakeClock()
	var (
		mu   sync.Mutex
		recs []broker.SendRecord
	)
	b, c1 := start(t, broker.WithQueues(1), broker.WithClock(clock.Now), broker.WithMaxBodyBytes(10),
		broker.WithThrottle(broker.Throttle{MaxSendRate: 3}),
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
	v2send(t, c2, v2msg("t", "a"), big)             // a duplicate, a bad request
	v2send(t, c2, v2msg("t", "c"), v2msg("t", "d")) // over the rate
	require.NoError(t, b.SetFaults(broker.Faults{InternalRate: 1}))
	_, err := send(t, c1, msg("t", "e"))
	require.Error(t, err)

	v1, v2 := broker.ProtocolRocketryV1, broker.ProtocolRocketMQV2
	t0 := newFakeClock().Now()
	t1 := t0.Add(time.Millisecond)
	want := []broker.SendRecord{
		{Protocol: v1, MessageID: "a", Topic: "t", Time: t0, Result: broker.SendStored},
		{Protocol: v1, MessageID: "b", Topic: "t", Time: t0, Result: broker.SendStored},
		{Protocol: v2, MessageID: "a", Topic: "t", Time: t1, Result: broker.SendDuplicate},
		{Protocol: v2, MessageID: "big", Topic: "t", Time: t1, Result: broker.SendBadRequest, Reason: "MESSAGE_TOO_LARGE"},
		{Protocol: v2, MessageID: "c", Topic: "t", Time: t1, Result: broker.SendThrottled, Reason: "SEND_RATE"},
		{Protocol: v2, MessageID: "d", Topic: "t", Time: t1, Result: broker.SendThrottled, Reason: "SEND_RATE"},
		{Protocol: v1, MessageID: "e", Topic: "t", Time: t1, Result: broker.SendFault, Reason: "internal"},
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, want, recs)
}
