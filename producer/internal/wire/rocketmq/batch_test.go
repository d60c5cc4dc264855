package wirermq

import (
	"context"
	"testing"
	"time"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/message"
	"github.com/rocketry-go/rocketry/producer/internal/batch"
	"github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq/rmqtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sendBatched sends ms as the first attempts of async sends through one
// batcher of batches of 2, the ones that join a batch the only async
// sends in flight, so that a batch goes as soon as it is full or every one
// of them has joined one (the batcher's Nagle rule), never on its linger
// (an hour). It returns the number
// of messages of each SendMessage the server saw.
func sendBatched(t *testing.T, ms ...message.Message) []int {
	t.Helper()
	srv := rmqtest.Start(t)
	srv.SetSettings(rmqtest.Settings(0))
	srv.SetRoute("t", rmqtest.QueueOn(t, srv, "t", "broker-a", 0))
	c := newTestRMQClient(t, []string{srv.Addr})
	require.NoError(t, c.start(t.Context()))
	tr := &Transport{c: c, cfg: c.cfg}
	_, err := c.route(t.Context(), "t") // the route is cached: every send joins at once
	require.NoError(t, err)

	slots := make(chan struct{}, 8)
	for _, m := range ms {
		m.ID, m.Topic = "id", "t"
		if _, ok := batchProps(toRMQ(&m, "", "h", time.Now())); ok {
			slots <- struct{}{} // the async sends in flight are the ones of ms that join a batch
		}
	}
	bt := batch.New(batch.Config{Linger: time.Hour, MaxMessages: 2, MaxBytes: 1 << 20}, slots, context.Background())
	require.Equal(t, 2, bt.MaxMessages())
	errs := make(chan error, len(ms))
	for _, m := range ms {
		m.Topic = "t"
		m.ID = c.ids.next()
		go func() {
			r, f := tr.Send(t.Context(), m, bt, nil)
			if f != nil {
				errs <- f
				return
			}
			assert.Equal(t, 1, r.Attempts)
			errs <- nil
		}()
	}
	for range ms {
		require.NoError(t, <-errs)
	}
	bt.Close()
	var sizes []int
	srv.Seen(func(s *rmqtest.Server) {
		for _, req := range s.Sends {
			sizes = append(sizes, len(req.GetMessages()))
		}
	})
	return sizes
}

// TestRmqBatchHoldsOnlyMessagesThatAgree: a proxy stores a batch with its
// first message's properties (batchProps), so two async sends share a
// SendMessage only when their tag, keys and user properties agree, and
// neither is timed.
func TestRmqBatchHoldsOnlyMessagesThatAgree(t *testing.T) {
	due := time.Now().Add(time.Hour)
	for _, tc := range []struct {
		name  string
		a, b  message.Message
		share bool
	}{
		{"no tag, keys or properties", message.Message{}, message.Message{}, true},
		{"the same tag", message.Message{Tag: "a"}, message.Message{Tag: "a"}, true},
		{"the same keys and properties, other maps", message.Message{Tag: "a", Keys: []string{"k1", "k2"}, Properties: map[string]string{"p": "1", "q": "2"}},
			message.Message{Tag: "a", Keys: []string{"k1", "k2"}, Properties: map[string]string{"q": "2", "p": "1"}}, true},
		{"other tags", message.Message{Tag: "a"}, message.Message{Tag: "b"}, false},
		{"a tag and none", message.Message{Tag: "a"}, message.Message{}, false},
		{"other keys", message.Message{Keys: []string{"k1"}}, message.Message{Keys: []string{"k2"}}, false},
		{"keys in another order", message.Message{Keys: []string{"k1", "k2"}}, message.Message{Keys: []string{"k2", "k1"}}, false},
		{"other property values", message.Message{Properties: map[string]string{"p": "1"}}, message.Message{Properties: map[string]string{"p": "2"}}, false},
		{"a property and none", message.Message{Properties: map[string]string{"p": ""}}, message.Message{}, false},
		{"timed messages, the same delivery time", message.Message{DeliveryTime: due}, message.Message{DeliveryTime: due}, false},
		{"timed and not", message.Message{DeliveryTime: due}, message.Message{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sizes := sendBatched(t, tc.a, tc.b)
			if tc.share {
				assert.Equal(t, []int{2}, sizes, "one SendMessage of both")
			} else {
				assert.Equal(t, []int{1, 1}, sizes, "a SendMessage each")
			}
		})
	}
}

// TestRmqBatchProps pins the batch key: a tag alone keys by itself, with
// no allocation; keys of different parts never meet, a tag that looks like
// an encoded key included; FIFO, transactional and timed messages never
// batch.
func TestRmqBatchProps(t *testing.T) {
	conv := func(m message.Message) *rocketmqv2.Message {
		m.ID, m.Topic = "id", "t"
		return toRMQ(&m, "", "h", time.Now())
	}
	tagged := conv(message.Message{Tag: "orders"})
	k, ok := batchProps(tagged)
	require.True(t, ok)
	assert.Equal(t, "orders", k)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = batchProps(tagged) }), "a tag alone costs no allocation")

	withProps := conv(message.Message{Tag: "a", Properties: map[string]string{"b": "c"}})
	encoded, ok := batchProps(withProps)
	require.True(t, ok)
	seen := map[string]string{}
	for name, m := range map[string]message.Message{
		"tag a":                    {Tag: "a"},
		"no tag":                   {},
		"the encoded key as a tag": {Tag: encoded},
		"key a":                    {Keys: []string{"a"}},
		"keys a b":                 {Keys: []string{"a", "b"}},
		"key a b":                  {Keys: []string{"a b"}},
		"property a=b":             {Properties: map[string]string{"a": "b"}},
		"property ab=":             {Properties: map[string]string{"ab": ""}},
		"tag a, property b=c":      {Tag: "a", Properties: map[string]string{"b": "c"}},
		"tag ab, property =c":      {Tag: "ab", Properties: map[string]string{"": "c"}},
	} {
		k, ok := batchProps(conv(m))
		require.True(t, ok, name)
		if other, dup := seen[k]; dup {
			t.Errorf("%s and %s have the same batch key %q", name, other, k)
		}
		seen[k] = name
	}

	for name, m := range map[string]message.Message{
		"FIFO":          {MessageGroup: "g"},
		"transactional": {Transactional: true},
		"timed":         {DeliveryTime: time.Now().Add(time.Hour)},
	} {
		_, ok := batchProps(conv(m))
		assert.False(t, ok, name)
	}
}
