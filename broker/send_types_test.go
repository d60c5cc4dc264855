package broker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rocketry-go/rocketry/broker"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// TestV1MessageGroupAndDeliveryTime: over rocketry.v1, the messages of a
// group go to its queue in arrival order, each to its own group's queue in
// a request of several; a timed message joins its queue when due; a
// message of two types, a bad group or a delivery over 24 h ahead is
// refused 400.
func TestV1MessageGroupAndDeliveryTime(t *testing.T) {
	clock := newFakeClock()
	b, c := start(t, broker.WithQueues(8), broker.WithClock(clock.Now))
	fifo := func(id, g string) *rocketryv1.Message {
		m := msg("t", id)
		m.MessageGroup = g
		return m
	}
	mustSend(t, c, fifo("a1", "A"), fifo("b1", "B"), fifo("a2", "A"))
	mustSend(t, c, fifo("a3", "A"))
	timed := msg("t", "later")
	timed.DeliveryTime = timestamppb.New(clock.Now().Add(time.Minute))
	mustSend(t, c, timed)

	queueOf := map[string]int32{}
	var aOrder []string
	for _, m := range b.Messages("t") {
		queueOf[m.GetMessage().GetMessageId()] = m.GetQueueId()
		if m.GetMessage().GetMessageGroup() == "A" {
			aOrder = append(aOrder, m.GetMessage().GetMessageId())
		}
	}
	assert.Equal(t, []string{"a1", "a2", "a3"}, aOrder)
	assert.Equal(t, queueOf["a1"], queueOf["a3"])
	assert.Equal(t, queueOf["a1"], queueOf["a2"])
	first := receive(t, c, "t", "g", 0)
	require.Len(t, first, 4, "the timed message is not due")
	for _, m := range first {
		assert.NotEqual(t, "later", m.GetMessage().GetMessageId())
	}
	clock.Advance(time.Minute)
	got := receive(t, c, "t", "g", 0)
	require.Len(t, got, 1)
	assert.Equal(t, "later", got[0].GetMessage().GetMessageId())

	bad := []struct {
		name string
		m    *rocketryv1.Message
		want string
	}{
		{"group and delivery", &rocketryv1.Message{MessageGroup: "g", DeliveryTime: timestamppb.New(clock.Now())}, "FIFO or timed"},
		{"transactional group", &rocketryv1.Message{MessageGroup: "g", Transactional: true}, "transactional"},
		{"over 24 h", &rocketryv1.Message{DeliveryTime: timestamppb.New(clock.Now().Add(25 * time.Hour))}, "the most is 24h"},
		{"blank group", &rocketryv1.Message{MessageGroup: " "}, "whitespace"},
		{"long group", &rocketryv1.Message{MessageGroup: strings.Repeat("g", 64)}, "64 bytes"},
		{"control", &rocketryv1.Message{MessageGroup: "a\x01"}, "control"},
	}
	for _, tc := range bad {
		m := tc.m
		m.Topic, m.MessageId, m.Body = "t", "bad", []byte("x")
		_, err := send(t, c, m)
		st := wantRefusal(t, err, codes.InvalidArgument, rocketryv1.Code_CODE_BAD_REQUEST, 0)
		assert.Contains(t, st.Message(), tc.want, tc.name)
	}
}
