package producer

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/rocketry-go/rocketry/brokercode"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq/rmqtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// asyncResult is what one async send's callback got, and how many times it
// ran.
type asyncResult struct {
	r     *SendReceipt
	err   error
	calls atomic.Int32
}

// sendAllAsync sends ms with SendAsync, each on its ctx (ctxs[i], or
// Background when ctxs is shorter), and returns their results and a wait
// for every callback (which fails the test after 10 s).
func sendAllAsync(t *testing.T, p *Producer, ms []*Message, ctxs ...context.Context) ([]*asyncResult, func()) {
	t.Helper()
	res := make([]*asyncResult, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		ctx := context.Background()
		if i < len(ctxs) && ctxs[i] != nil {
			ctx = ctxs[i]
		}
		r := &asyncResult{}
		res[i] = r
		wg.Add(1)
		require.NoError(t, p.SendAsync(ctx, m, func(rc *SendReceipt, err error) {
			if r.calls.Add(1) == 1 {
				r.r, r.err = rc, err
				wg.Done()
			}
		}))
	}
	return res, func() {
		t.Helper()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("callbacks did not all run within 10s")
		}
	}
}

// holdSlot takes one async slot for the rest of the test, as an async send
// in flight elsewhere would: batches then never go early for want of
// company (every send in flight waiting), only when full or when their
// linger passes, so that a test knows which messages share a batch.
func holdSlot(t *testing.T, p *Producer) {
	p.async.slots <- struct{}{}
	t.Cleanup(func() { <-p.async.slots })
}

func msgs(n int, topic string) []*Message {
	out := make([]*Message, n)
	for i := range out {
		out[i] = &Message{Topic: topic, Body: []byte(fmt.Sprintf("m%d", i))}
	}
	return out
}

// TestBatchingStoresWithFewerRPCs: async sends share SendMessage calls on
// both protocols; every message is stored once, with its own receipt, and
// every callback runs once.
func TestBatchingStoresWithFewerRPCs(t *testing.T) {
	t.Parallel()
	for _, proto := range []Protocol{RocketryV1, RocketMQ5} {
		t.Run(proto.String(), func(t *testing.T) {
			b := brokertest.Start(t)
			p := newTestProducer(t, b.Addr(), WithProtocol(proto), WithBatching(20*time.Millisecond, 50, 1<<20))
			holdSlot(t, p)
			const n = 300
			before := b.Stats().GetSendRequests()
			res, wait := sendAllAsync(t, p, msgs(n, "t"))
			wait()
			ids := map[string]bool{}
			for i, r := range res {
				require.NoError(t, r.err, "message %d", i)
				assert.Equal(t, int32(1), r.calls.Load(), "callbacks of message %d", i)
				assert.Equal(t, 1, r.r.Attempts)
				ids[r.r.MessageID] = true
			}
			assert.Len(t, ids, n, "distinct IDs")
			assert.Len(t, b.Messages("t"), n, "stored")
			rpcs := b.Stats().GetSendRequests() - before
			assert.LessOrEqual(t, rpcs, int64(n/50+6), "SendMessage calls for %d messages", n)
			t.Logf("%d messages in %d calls", n, rpcs)
		})
	}
}

// TestBatchingRocketMQKeepsEachMessagesTag: over RocketMQ 5 with
// WithBatching, messages of three tags and some with keys, sent async
// together, are each stored with their own tag, keys and properties by the
// bundled broker, which stores a request of several messages as a
// RocketMQ 5 broker stores a proxy's batch (the first message's tag, keys
// and properties over every other's): a batch holds only messages that
// agree, and they still share calls.
func TestBatchingRocketMQKeepsEachMessagesTag(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t)
	p := newTestProducer(t, b.Addr(), WithProtocol(RocketMQ5), WithBatching(20*time.Millisecond, 50, 1<<20))
	holdSlot(t, p)
	const n = 300
	ms := msgs(n, "t")
	for i, m := range ms {
		m.Tag = fmt.Sprintf("tag-%d", i%3)
		if i%5 == 0 {
			m.Keys = []string{fmt.Sprintf("key-%d", i)}
		}
		m.Properties = map[string]string{"i": fmt.Sprint(i % 2)}
	}
	before := b.Stats().GetSendRequests()
	res, wait := sendAllAsync(t, p, ms)
	wait()
	byID := map[string]*Message{}
	for i, r := range res {
		require.NoError(t, r.err, "message %d", i)
		byID[r.r.MessageID] = ms[i]
	}
	stored := b.Messages("t")
	require.Len(t, stored, n)
	for _, s := range stored {
		m := byID[s.Message.MessageId]
		require.NotNil(t, m, "stored %q", s.Message.MessageId)
		assert.Equal(t, m.Tag, s.Message.Tag, "tag of %q", s.Message.MessageId)
		assert.Equal(t, m.Keys, s.Message.Keys, "keys of %q", s.Message.MessageId)
		assert.Equal(t, m.Properties, s.Message.Properties, "properties of %q", s.Message.MessageId)
	}
	rpcs := b.Stats().GetSendRequests() - before
	assert.Less(t, rpcs, int64(n), "messages that agree still share calls")
	t.Logf("%d messages in %d calls", n, rpcs)
}

// TestBatchingLoneSendDoesNotLinger: a batch whose every possible member is
// already in it goes at once, without waiting for its linger (an hour
// here: the send ends only if it did not wait).
func TestBatchingLoneSendDoesNotLinger(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t)
	p := newTestProducer(t, b.Addr(), WithBatching(time.Second, 128, 1<<20), withLinger(time.Hour))
	res, wait := sendAllAsync(t, p, msgs(1, "t"))
	wait()
	require.NoError(t, res[0].err)
	assert.Equal(t, int64(1), b.Stats().GetSendRequests())
}

// awaitBatch waits until pending sends of p wait in an open batch and
// sending in a batch on the wire.
func awaitBatch(t *testing.T, p *Producer, pending, sending int) {
	t.Helper()
	require.Eventually(t, func() bool {
		pe, se := batchWaiting(p)
		return pe == pending && se == sending
	}, 10*time.Second, time.Millisecond, "%d sends in an open batch, %d on the wire", pending, sending)
}

// TestSyncSendNeverBatches: Send goes alone, batching or not.
func TestSyncSendNeverBatches(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t)
	p := newTestProducer(t, b.Addr(), WithBatching(50*time.Millisecond, 128, 1<<20))
	const n = 20
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := p.Send(context.Background(), msg("t"))
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	assert.Equal(t, int64(n), b.Stats().GetSendRequests())
}

// TestBatchingOff: WithBatching(0, ...) sends every async message alone.
func TestBatchingOff(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t)
	p := newTestProducer(t, b.Addr(), WithBatching(0, 0, 0))
	assert.Nil(t, p.async.batch)
	_, wait := sendAllAsync(t, p, msgs(20, "t"))
	wait()
	assert.Equal(t, int64(20), b.Stats().GetSendRequests())
}

// TestBatchingRetriesAlone: a batch that failed as a whole (rocketry.v1
// 500, not stored) is retried message by message, each alone.
func TestBatchingRetriesAlone(t *testing.T) {
	t.Parallel()
	s := &stub{script: []error{err500}}
	p := newTestProducer(t, startStub(t, s), WithBatching(time.Second, 4, 1<<20))
	holdSlot(t, p)
	res, wait := sendAllAsync(t, p, msgs(4, "t"))
	wait()
	for i, r := range res {
		require.NoError(t, r.err, "message %d", i)
		assert.Equal(t, 2, r.r.Attempts, "message %d", i)
	}
	assert.Equal(t, 5, s.count(), "one batch, then each message alone")
}

// TestBatchingV1BadRequestSplits: a rocketry.v1 batch refused whole with a
// 4xx (the broker names no message) does not fail its good messages: each
// is sent again alone within its first attempt, so that even with one
// attempt allowed the good ones are stored and only the bad one fails.
func TestBatchingV1BadRequestSplits(t *testing.T) {
	t.Parallel()
	t.Run("stub", func(t *testing.T) {
		s := &stub{script: []error{err400}}
		p := newTestProducer(t, startStub(t, s), WithBatching(time.Second, 4, 1<<20), WithMaxAttempts(1))
		holdSlot(t, p)
		res, wait := sendAllAsync(t, p, msgs(4, "t"))
		wait()
		for i, r := range res {
			require.NoError(t, r.err, "message %d", i)
			assert.Equal(t, 1, r.r.Attempts, "message %d", i)
		}
		assert.Equal(t, 5, s.count(), "the batch, then each message alone")
	})
	t.Run("broker", func(t *testing.T) {
		b := brokertest.Start(t)
		rec := &recorder{}
		p := newTestProducer(t, b.Addr(), WithBatching(time.Second, 4, 1<<20), WithMaxAttempts(1),
			WithRetryBudget(1, 0.1), WithObserver(rec.observe))
		holdSlot(t, p)
		ms := msgs(4, "t")
		ms[2].Properties = map[string]string{"": "a property without a name"}
		res, wait := sendAllAsync(t, p, ms)
		wait()
		for i, r := range res {
			if i == 2 {
				var se *SendError
				require.ErrorAs(t, r.err, &se)
				assert.ErrorIs(t, r.err, ErrNotRetryable)
				assert.Equal(t, Permanent, se.Last)
				assert.Equal(t, 1, se.Attempts)
				continue
			}
			require.NoError(t, r.err, "message %d", i)
			assert.Equal(t, 1, r.r.Attempts)
		}
		assert.Len(t, b.Messages("t"), 3)
		assert.Equal(t, int64(5), b.Stats().GetSendRequests())
		assert.Equal(t, "attempt success", rec.kinds(ms[0].ID), "one attempt, no retry")
	})
}

// TestBatchingRocketMQPerEntry: over apache.rocketmq.v2 a batch with a bad
// message is refused whole, as the RocketMQ 5 proxy refuses it (its
// validation fails the request, with no entry): the bad message fails
// permanently with its code, and the others are stored.
func TestBatchingRocketMQPerEntry(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t)
	p := newTestProducer(t, b.Addr(), WithProtocol(RocketMQ5), WithBatching(time.Second, 4, 1<<20))
	holdSlot(t, p)
	ms := msgs(4, "t")
	ms[1].Properties = map[string]string{"UNIQ_KEY": "a reserved property"}
	res, wait := sendAllAsync(t, p, ms)
	wait()
	for i, r := range res {
		if i == 1 {
			var se *SendError
			require.ErrorAs(t, r.err, &se)
			assert.Equal(t, Permanent, se.Last)
			assert.Equal(t, int32(rocketmqv2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY), se.WireCode)
			continue
		}
		require.NoError(t, r.err, "message %d", i)
	}
	assert.Len(t, b.Messages("t"), 3)
}

// TestBatchingRocketMQRetriesOnlyThrottledEntry: an apache.rocketmq.v2
// batch whose answer throttles one entry retries that message only, alone.
func TestBatchingRocketMQRetriesOnlyThrottledEntry(t *testing.T) {
	t.Parallel()
	srv := rmqtest.Start(t)
	srv.SetSettings(rmqtest.Settings(0))
	srv.SetRoute("t", rmqtest.QueueOn(t, srv, "t", "broker-a", 0), rmqtest.QueueOn(t, srv, "t", "broker-a", 1))
	var throttled atomic.Bool
	srv.SetAnswer(func(req *rocketmqv2.SendMessageRequest) *rocketmqv2.SendMessageResponse {
		resp := &rocketmqv2.SendMessageResponse{}
		for i, m := range req.GetMessages() {
			st := &rocketmqv2.Status{Code: rocketmqv2.Code_OK}
			if string(m.GetBody()) == "hot" && throttled.CompareAndSwap(false, true) {
				st = &rocketmqv2.Status{Code: rocketmqv2.Code_TOO_MANY_REQUESTS, Message: "STORAGE_LOAD: busy"}
			}
			resp.Entries = append(resp.Entries, &rocketmqv2.SendResultEntry{Status: st, MessageId: m.GetSystemProperties().GetMessageId(), Offset: int64(i)})
		}
		resp.Status = &rocketmqv2.Status{Code: rocketmqv2.Code_MULTIPLE_RESULTS}
		return resp
	})
	p := newTestProducer(t, srv.Addr, WithProtocol(RocketMQ5), WithBatching(time.Second, 4, 1<<20),
		WithThrottleSchedule(msSchedule(t)), WithPacing(false))
	holdSlot(t, p)
	ms := msgs(4, "t")
	ms[3].Body = []byte("hot") // not its tag: a RocketMQ 5 batch holds only messages whose tags agree
	res, wait := sendAllAsync(t, p, ms)
	wait()
	for i, r := range res {
		require.NoError(t, r.err, "message %d", i)
		want := 1
		if i == 3 {
			want = 2
		}
		assert.Equal(t, want, r.r.Attempts, "message %d", i)
	}
	var sizes []int
	srv.Seen(func(s *rmqtest.Server) {
		for _, req := range s.Sends {
			sizes = append(sizes, len(req.GetMessages()))
		}
		queues := map[int32]bool{}
		for _, m := range s.Sends[0].GetMessages() {
			queues[m.GetSystemProperties().GetQueueId()] = true
		}
		assert.Len(t, queues, 1, "a batch goes to one queue")
	})
	assert.Equal(t, []int{4, 1}, sizes, "the batch, then the throttled message alone")
}

// TestBatchingCloseWithPendingBatch: Close lets a batch that is still
// gathering go and waits for its answer; with Close's context already
// ended, the messages waiting are taken out unsent and fail with
// ErrClosed. Either way every callback runs once, and the package's leak
// check finds no goroutine left.
func TestBatchingCloseWithPendingBatch(t *testing.T) {
	t.Parallel()
	for _, proto := range []Protocol{RocketryV1, RocketMQ5} {
		t.Run(proto.String()+"/waits", func(t *testing.T) {
			b := brokertest.Start(t)
			p, err := New(b.Addr(), WithProtocol(proto), WithBatching(200*time.Millisecond, 128, 1<<20))
			require.NoError(t, err)
			p.async.slots <- struct{}{} // a phantom send: the batch waits its linger
			res, wait := sendAllAsync(t, p, msgs(5, "t"))
			require.NoError(t, p.Close(context.Background()))
			<-p.async.slots
			wait()
			for i, r := range res {
				require.NoError(t, r.err, "message %d", i)
				assert.Equal(t, int32(1), r.calls.Load())
			}
			assert.Len(t, b.Messages("t"), 5)
		})
		t.Run(proto.String()+"/gives up", func(t *testing.T) {
			b := brokertest.Start(t)
			// An hour's linger: the callbacks run only if Close does not
			// wait for it.
			p, err := New(b.Addr(), WithProtocol(proto), WithBatching(time.Second, 128, 1<<20), withLinger(time.Hour))
			require.NoError(t, err)
			p.async.slots <- struct{}{}
			res, wait := sendAllAsync(t, p, msgs(5, "t"))
			awaitBatch(t, p, 5, 0)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			assert.ErrorIs(t, p.Close(ctx), context.Canceled)
			wait()
			<-p.async.slots
			for i, r := range res {
				assert.ErrorIs(t, r.err, ErrClosed, "message %d", i)
				assert.Equal(t, int32(1), r.calls.Load())
			}
			assert.Empty(t, b.Messages("t"), "taken out before the batch went")
			assert.Equal(t, int64(0), b.Stats().GetSendRequests())
		})
	}
}

// TestBatchingCancelOneEntry: a message whose context ends while it waits
// in a batch leaves at once, with its context's error; the batch goes on
// for the others. Before the batch is sent the message is taken out of it
// (never stored); after, it leaves without waiting for the answer.
func TestBatchingCancelOneEntry(t *testing.T) {
	for _, proto := range []Protocol{RocketryV1, RocketMQ5} {
		t.Run(proto.String()+"/gathering", func(t *testing.T) {
			t.Parallel()
			b := brokertest.Start(t)
			// An hour's linger, batches of 4: the batch goes when a
			// fourth message joins it, never at its linger.
			p := newTestProducer(t, b.Addr(), WithProtocol(proto), WithBatching(time.Second, 4, 1<<20), withLinger(time.Hour))
			holdSlot(t, p)
			ctx, cancel := context.WithCancel(context.Background())
			ms := msgs(5, "t")
			res, wait := sendAllAsync(t, p, ms[:3], nil, ctx)
			awaitBatch(t, p, 3, 0)
			cancel()
			require.Eventually(t, func() bool { return res[1].calls.Load() == 1 }, 10*time.Second, time.Millisecond,
				"the cancelled message leaves without waiting for the linger")
			awaitBatch(t, p, 2, 0)
			assert.Zero(t, res[0].calls.Load()+res[2].calls.Load(), "the others still wait")
			more, waitMore := sendAllAsync(t, p, ms[3:]) // the batch is full: it goes
			wait()
			waitMore()
			res = append(res, more...)
			assert.ErrorIs(t, res[1].err, context.Canceled)
			var se *SendError
			require.ErrorAs(t, res[1].err, &se)
			assert.Equal(t, 1, se.Attempts)
			for _, i := range []int{0, 2, 3, 4} {
				require.NoError(t, res[i].err, "message %d", i)
			}
			stored := b.Messages("t")
			assert.Len(t, stored, 4)
			for _, m := range stored {
				assert.NotEqual(t, ms[1].ID, m.GetMessage().GetMessageId(), "the cancelled message was taken out")
			}
			assert.Equal(t, int64(1), b.Stats().GetSendRequests(), "one batch")
		})
		t.Run(proto.String()+"/sent", func(t *testing.T) {
			t.Parallel()
			b := brokertest.Start(t, broker.WithFaults(broker.Faults{Latency: time.Second}))
			p := newTestProducer(t, b.Addr(), WithProtocol(proto), WithBatching(time.Second, 4, 1<<20))
			holdSlot(t, p)
			ctx, cancel := context.WithCancel(context.Background())
			res, wait := sendAllAsync(t, p, msgs(4, "t"), nil, nil, ctx)
			awaitBatch(t, p, 0, 4) // the batch is full: on the wire
			cancel()
			require.Eventually(t, func() bool { return res[2].calls.Load() == 1 }, 10*time.Second, time.Millisecond,
				"the cancelled message leaves")
			// It left before the answer: the others still wait for it.
			assert.Zero(t, res[0].calls.Load()+res[1].calls.Load()+res[3].calls.Load(), "callbacks before the answer")
			wait()
			assert.ErrorIs(t, res[2].err, context.Canceled)
			for _, i := range []int{0, 1, 3} {
				require.NoError(t, res[i].err, "message %d", i)
				assert.Equal(t, 1, res[i].r.Attempts)
			}
		})
	}
}

// TestBatchingBigMessageGoesAlone: a message of maxBytes or more never
// joins a batch; batches stop short of maxBytes.
func TestBatchingBigMessageGoesAlone(t *testing.T) {
	t.Parallel()
	s := &stub{}
	p := newTestProducer(t, startStub(t, s), WithBatching(50*time.Millisecond, 128, 1000))
	holdSlot(t, p)
	ms := msgs(5, "t")
	ms[0].Body = make([]byte, 1000)
	for _, m := range ms[1:] {
		m.Body = make([]byte, 400) // two fit in 1000 bytes, not three
	}
	_, wait := sendAllAsync(t, p, ms)
	wait()
	assert.Equal(t, 3, s.count(), "the big one alone, then two batches of two")
}

// TestWithBatchingValidation: WithBatching's arguments are checked in New,
// with an *OptionError naming it.
func TestWithBatchingValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		linger      time.Duration
		maxMessages int
		maxBytes    int
		reason      string
	}{
		{-time.Millisecond, 10, 10, "linger"},
		{2 * time.Second, 10, 10, "linger"},
		{time.Millisecond, 0, 10, "maxMessages"},
		{time.Millisecond, 10, 0, "maxBytes"},
	} {
		_, err := New("127.0.0.1:1", WithProtocol(RocketryV1), WithBatching(tc.linger, tc.maxMessages, tc.maxBytes))
		var oe *OptionError
		require.ErrorAs(t, err, &oe, "WithBatching(%v, %d, %d)", tc.linger, tc.maxMessages, tc.maxBytes)
		assert.Equal(t, "WithBatching", oe.Option)
		assert.True(t, strings.Contains(oe.Reason, tc.reason), "reason %q names %s", oe.Reason, tc.reason)
	}
	_, err := NewUnaryClientInterceptor(WithBatching(time.Millisecond, 10, 10))
	var oe *OptionError
	require.ErrorAs(t, err, &oe, "the interceptor has no async sends")
	assert.Equal(t, "WithBatching", oe.Option)
	for _, ok := range []Option{WithBatching(0, 0, 0), WithBatching(time.Second, 1, 1)} {
		p, err := New("127.0.0.1:1", WithProtocol(RocketryV1), ok)
		require.NoError(t, err)
		require.NoError(t, p.Close(context.Background()))
	}
}

// TestBatchingCapsBatchByMaxInFlight: a batch holds at most a quarter of
// MaxInFlight, and below 8 there is no batching.
func TestBatchingCapsBatchByMaxInFlight(t *testing.T) {
	t.Parallel()
	p := newTestProducer(t, "127.0.0.1:1", WithMaxInFlight(64))
	require.NotNil(t, p.async.batch)
	assert.Equal(t, 16, p.async.batch.MaxMessages())
	p = newTestProducer(t, "127.0.0.1:1", WithMaxInFlight(7))
	assert.Nil(t, p.async.batch)
	p = newTestProducer(t, "127.0.0.1:1")
	assert.Equal(t, DefaultBatchMessages, p.async.batch.MaxMessages())
	assert.LessOrEqual(t, DefaultBatchMessages, broker.DefaultMaxBatch, "a default batch is one request the bundled broker takes")
	assert.Less(t, DefaultBatchBytes, 4<<20, "under gRPC's default limit of a request")
}

// TestBatchingOverBrokerLimitSplits: a batch over the broker's limit of one
// request (broker.WithMaxBatch) is refused whole, on both protocols; every
// message is then sent alone within its first attempt and stored.
func TestBatchingOverBrokerLimitSplits(t *testing.T) {
	t.Parallel()
	for _, proto := range []Protocol{RocketryV1, RocketMQ5} {
		t.Run(proto.String(), func(t *testing.T) {
			b := brokertest.Start(t, broker.WithMaxBatch(2))
			p := newTestProducer(t, b.Addr(), WithProtocol(proto), WithBatching(time.Second, 4, 1<<20))
			holdSlot(t, p)
			before := b.Stats().GetSendRequests()
			res, wait := sendAllAsync(t, p, msgs(4, "t"))
			wait()
			for i, r := range res {
				require.NoError(t, r.err, "message %d", i)
				assert.Equal(t, 1, r.r.Attempts)
			}
			assert.Len(t, b.Messages("t"), 4)
			assert.Equal(t, int64(5), b.Stats().GetSendRequests()-before, "the batch, then each message alone")
		})
	}
}

// TestBatchingRocketMQTopicNotFoundDoesNotSplit: an apache.rocketmq.v2
// batch refused with TOPIC_NOT_FOUND and no entry is not sent again
// message by message (a batch has one topic: the answer is true of every
// message), as on rocketry.v1; batch.Split decides it for both protocols.
func TestBatchingRocketMQTopicNotFoundDoesNotSplit(t *testing.T) {
	t.Parallel()
	srv := rmqtest.Start(t)
	srv.SetSettings(rmqtest.Settings(0))
	srv.SetRoute("t", rmqtest.QueueOn(t, srv, "t", "broker-a", 0))
	srv.SetAnswer(func(*rocketmqv2.SendMessageRequest) *rocketmqv2.SendMessageResponse {
		return &rocketmqv2.SendMessageResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_TOPIC_NOT_FOUND, Message: "no such topic"}}
	})
	p := newTestProducer(t, srv.Addr, WithProtocol(RocketMQ5), WithBatching(time.Second, 4, 1<<20))
	holdSlot(t, p)
	res, wait := sendAllAsync(t, p, msgs(4, "t"))
	wait()
	for i, r := range res {
		var se *SendError
		require.ErrorAs(t, r.err, &se, "message %d", i)
		assert.Equal(t, brokercode.TopicNotFound, se.Code, "message %d", i)
		assert.Equal(t, 1, se.Attempts, "message %d", i)
	}
	var sizes []int
	srv.Seen(func(s *rmqtest.Server) {
		for _, req := range s.Sends {
			sizes = append(sizes, len(req.GetMessages()))
		}
	})
	assert.Equal(t, []int{4}, sizes, "the batch only")
}
