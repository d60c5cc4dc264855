package deadletter_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/rocketry-go/rocketry/producer"
	"github.com/rocketry-go/rocketry/producer/deadletter"
)

// TestReplayFIFOInSendOrder: the messages of a FIFO group that failed are
// dead-lettered in send order, and a replay stores them in that order,
// whatever the order of their IDs (the store's keys).
func TestReplayFIFOInSendOrder(t *testing.T) {
	b := brokertest.Start(t, broker.WithQueues(1))
	s, err := deadletter.Open(filepath.Join(t.TempDir(), "dead.db"))
	require.NoError(t, err)
	defer s.Close()

	require.NoError(t, b.SetFaults(broker.Faults{Unavailable: true}))
	p := newProducer(t, b.Addr(), producer.WithDeadLetterSink(s), producer.WithMaxAttempts(2))
	var sent []string
	for i := range 8 {
		id := fmt.Sprintf("z-%d", 9-i) // IDs in the reverse of the send order
		sent = append(sent, id)
		_, err := p.Send(context.Background(), &producer.Message{ID: id, Topic: "orders", MessageGroup: "g", Body: []byte(id)})
		require.Error(t, err, id)
	}
	require.NoError(t, b.SetFaults(broker.Faults{}))

	res, err := s.Replay(context.Background(), p, deadletter.ReplayOptions{})
	require.NoError(t, err)
	assert.Equal(t, len(sent), res.Stored)
	var got []string
	for _, m := range b.Messages("orders") {
		got = append(got, m.GetMessage().GetMessageId())
	}
	assert.Equal(t, sent, got, "the group stored in send order")
}

// orderSink is a Resender that records the order of what it is sent and
// refuses the IDs in fail.
type orderSink struct {
	mu   sync.Mutex
	fail map[string]bool
	sent []string
}

func (o *orderSink) Resend(_ context.Context, d *producer.DeadLetter) (*producer.SendReceipt, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sent = append(o.sent, d.Message.ID)
	if o.fail[d.Message.ID] {
		return nil, errors.New("refused by the test")
	}
	return &producer.SendReceipt{MessageID: d.Message.ID}, nil
}

// TestReplayFIFOGroupStopsAtAFailure: a FIFO group's replay stops at its
// first record not stored, leaving the rest for the next replay; other
// groups and plain records go on; the next replay resumes the group in
// order.
func TestReplayFIFOGroupStopsAtAFailure(t *testing.T) {
	s, err := deadletter.Open(filepath.Join(t.TempDir(), "dead.db"))
	require.NoError(t, err)
	defer s.Close()
	put := func(id, group string) {
		require.NoError(t, s.Put(&producer.DeadLetter{Message: &producer.Message{ID: id, Topic: "t", MessageGroup: group, Body: []byte(id)}}))
	}
	for _, id := range []string{"a-3", "a-1", "a-2"} { // put (send) order: a-3, a-1, a-2
		put(id, "a")
	}
	for _, id := range []string{"b-2", "b-1"} {
		put(id, "b")
	}
	put("plain", "")

	o := &orderSink{fail: map[string]bool{"a-1": true}}
	res, err := s.Replay(context.Background(), o, deadletter.ReplayOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"plain", "a-3", "a-1", "b-2", "b-1"}, o.sent, "plain first, then each group in put order, a stopping at a-1")
	assert.Equal(t, deadletter.ReplayResult{Stored: 4, Failed: 1, Left: 1}, res)

	o.fail = nil
	o.sent = nil
	res, err = s.Replay(context.Background(), o, deadletter.ReplayOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"a-1", "a-2"}, o.sent, "the group resumes in order")
	assert.Equal(t, deadletter.ReplayResult{Stored: 2}, res)
	n, err := s.Len()
	require.NoError(t, err)
	assert.Zero(t, n)
}
