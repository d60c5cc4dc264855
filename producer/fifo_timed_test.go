package producer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTimedMessage: a timed message is stored, over both protocols, and
// held from consumers until its delivery time; the stored message keeps
// its group or delivery time.
func TestTimedMessage(t *testing.T) {
	t.Parallel()
	for _, proto := range []Protocol{RocketryV1, RocketMQ5} {
		t.Run(proto.String(), func(t *testing.T) {
			b := brokertest.Start(t)
			p := newTestProducer(t, b.Addr(), WithProtocol(proto))
			ctx := context.Background()
			at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
			timed := &Message{Topic: "t", DeliveryTime: at, Body: []byte("later")}
			_, err := p.Send(ctx, timed)
			require.NoError(t, err)
			fifo := &Message{Topic: "t", MessageGroup: "g", Body: []byte("now")}
			_, err = p.Send(ctx, fifo)
			require.NoError(t, err)

			ms := b.Messages("t")
			require.Len(t, ms, 2)
			byID := map[string]*rocketryv1.ReceivedMessage{}
			for _, m := range ms {
				byID[m.GetMessage().GetMessageId()] = m
			}
			tm := byID[timed.ID]
			require.NotNil(t, tm)
			assert.Equal(t, int64(-1), tm.GetOffset(), "held until due")
			assert.True(t, at.Equal(tm.GetMessage().GetDeliveryTime().AsTime()))
			fm := byID[fifo.ID]
			require.NotNil(t, fm)
			assert.Equal(t, "g", fm.GetMessage().GetMessageGroup())
			assert.GreaterOrEqual(t, fm.GetOffset(), int64(0))

			got, err := consumerClient(t, b).ReceiveMessages(ctx, &rocketryv1.ReceiveMessagesRequest{Topic: "t", Group: "c"})
			require.NoError(t, err)
			require.Len(t, got.GetMessages(), 1, "only the FIFO message is visible")
			assert.Equal(t, fifo.ID, got.GetMessages()[0].GetMessage().GetMessageId())
		})
	}
}

// TestFifoTimedValidation: a message of two types, a bad group or a
// delivery time over 24 h ahead is refused before any attempt, over both
// protocols, with an error naming the fields.
func TestFifoTimedValidation(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t)
	long := strings.Repeat("g", MaxMessageGroupBytes+1)
	cases := []struct {
		name string
		m    Message
		want string
	}{
		{"group and delivery", Message{MessageGroup: "g", DeliveryTime: time.Now().Add(time.Minute)}, "MessageGroup and DeliveryTime"},
		{"transactional group", Message{Transactional: true, MessageGroup: "g"}, "Transactional and MessageGroup"},
		{"transactional timed", Message{Transactional: true, DeliveryTime: time.Now().Add(time.Minute)}, "Transactional and DeliveryTime"},
		{"over 24 h", Message{DeliveryTime: time.Now().Add(MaxDeliveryDelay + time.Minute)}, "DeliveryTime"},
		{"blank group", Message{MessageGroup: " \t"}, "blank"},
		{"long group", Message{MessageGroup: long}, "MessageGroup is 64 bytes"},
		{"control", Message{MessageGroup: "a\x01b"}, "control character"},
		{"not UTF-8", Message{MessageGroup: "a\xffb"}, "UTF-8"},
	}
	for _, proto := range []Protocol{RocketryV1, RocketMQ5} {
		p := newTestProducer(t, b.Addr(), WithProtocol(proto))
		for _, c := range cases {
			m := c.m
			m.Topic, m.Body = "t", []byte("x")
			_, err := p.Send(context.Background(), &m)
			if proto == RocketMQ5 && m.Transactional {
				require.ErrorIs(t, err, ErrInvalidMessage, "%v %s", proto, c.name) // refused either way
				continue
			}
			require.ErrorIs(t, err, ErrInvalidMessage, "%v %s", proto, c.name)
			assert.Contains(t, err.Error(), c.want, "%v %s", proto, c.name)
			m2 := c.m
			m2.Topic, m2.Body = "t", []byte("x")
			assert.ErrorIs(t, p.SendAsync(context.Background(), &m2, nil), ErrInvalidMessage, "%v %s async", proto, c.name)
		}
	}
	assert.Zero(t, b.Stats().GetSendRequests(), "no attempt")

	// Within the limits: a delivery time just under 24 h ahead, a group of
	// 63 bytes, a delivery time past (at once).
	p := newTestProducer(t, b.Addr())
	for _, m := range []*Message{
		{Topic: "t", Body: []byte("x"), DeliveryTime: time.Now().Add(MaxDeliveryDelay - time.Minute)},
		{Topic: "t", Body: []byte("x"), MessageGroup: long[:MaxMessageGroupBytes]},
		{Topic: "t", Body: []byte("x"), DeliveryTime: time.Now().Add(-time.Hour)},
	} {
		_, err := p.Send(context.Background(), m)
		assert.NoError(t, err)
	}
}

// TestFifoCloseCancelsTheWaiting: Close that gives up waiting ends the
// send in flight and the async sends waiting behind it, each with a
// callback, and leaves no goroutine (the leak check of TestMain).
func TestFifoCloseCancelsTheWaiting(t *testing.T) {
	t.Parallel()
	held := make(chan struct{})
	var heldOnce sync.Once
	s := &fifoStub{answer: func(ctx context.Context, m *rocketryv1.Message) error {
		heldOnce.Do(func() { close(held) })
		<-ctx.Done() // never answers: the attempt ends with the send
		return ctx.Err()
	}}
	addr := startFifoStub(t, s)
	sink := newMemSink()
	p, err := New(addr, WithProtocol(RocketryV1), WithDeadLetterSink(sink))
	require.NoError(t, err)
	results := make(chan error, 8)
	for i := range 5 {
		m := &Message{Topic: "t", MessageGroup: "g", Body: fmt.Appendf(nil, "g-%d", i)}
		require.NoError(t, p.SendAsync(context.Background(), m, func(_ *SendReceipt, err error) { results <- err }))
	}
	<-held
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.Error(t, p.Close(ctx))
	for range 5 {
		err := <-results
		assert.True(t, errors.Is(err, ErrClosed) || errors.Is(err, ErrGroupFailed), "%v", err)
	}
	assert.Equal(t, 5, sink.len(), "every message kept")
	assert.Empty(t, s.storedOf("g-"))
}
