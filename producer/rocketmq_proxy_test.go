package producer

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/brokercode"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq/rmqtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// This file tests the producer against answers shaped as Apache RocketMQ's
// proxy makes them, on a scripted apache.rocketmq.v2 server (rmqtest.Server)
// whose SendMessage answers as the proxy does.

// proxyStore is the SendMessage of a scripted proxy in cluster mode
// (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/producer/SendMessageActivity.java
// over ClusterMessageService.java): a request's messages are stored whole
// as one batch, with no deduplication by message ID, and answered with ONE
// entry whose message_id is their IDs joined by commas and whose offset is
// the first message's. refuse, when set, answers a request with a status
// alone (a failed call: nothing stored) instead.
type proxyStore struct {
	refuse func(req *rocketmqv2.SendMessageRequest) *rocketmqv2.Status
	// lose, when set and true for a request (by its number, from 1), stores
	// it and answers 50001 instead of OK: a proxy's exception after the
	// broker wrote the messages.
	lose func(n int) bool

	mu       sync.Mutex
	copies   map[string]int // message ID -> copies stored
	offset   int64
	requests int
	batches  int // requests of more than one message
}

func newProxyStore() *proxyStore { return &proxyStore{copies: map[string]int{}} }

func (ps *proxyStore) answer(req *rocketmqv2.SendMessageRequest) *rocketmqv2.SendMessageResponse {
	if ps.refuse != nil {
		if st := ps.refuse(req); st != nil {
			return &rocketmqv2.SendMessageResponse{Status: st}
		}
	}
	ids := make([]string, len(req.GetMessages()))
	for i, m := range req.GetMessages() {
		ids[i] = m.GetSystemProperties().GetMessageId()
	}
	ps.mu.Lock()
	ps.requests++
	lost := ps.lose != nil && ps.lose(ps.requests)
	if len(ids) > 1 {
		ps.batches++
	}
	for _, id := range ids {
		ps.copies[id]++
	}
	off := ps.offset
	ps.offset += int64(len(ids))
	ps.mu.Unlock()
	if lost {
		return &rocketmqv2.SendMessageResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_INTERNAL_SERVER_ERROR, Message: "java.lang.NullPointerException"}}
	}
	ok := &rocketmqv2.Status{Code: rocketmqv2.Code_OK, Message: "OK"}
	return &rocketmqv2.SendMessageResponse{Status: ok, Entries: []*rocketmqv2.SendResultEntry{{
		Status: ok, MessageId: strings.Join(ids, ","), Offset: off,
	}}}
}

// stored returns the copies of each ID and the requests seen.
func (ps *proxyStore) stored() (copies map[string]int, requests, batches int) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	copies = make(map[string]int, len(ps.copies))
	for k, v := range ps.copies {
		copies[k] = v
	}
	return copies, ps.requests, ps.batches
}

// startProxy starts a scripted proxy serving topic "t" on two queues of
// broker-a, answering sends from ps.
func startProxy(t *testing.T, ps *proxyStore) *rmqtest.Server {
	t.Helper()
	srv := rmqtest.Start(t)
	srv.SetSettings(rmqtest.Settings(0))
	srv.SetRoute("t", rmqtest.QueueOn(t, srv, "t", "broker-a", 0), rmqtest.QueueOn(t, srv, "t", "broker-a", 1))
	srv.SetAnswer(ps.answer)
	return srv
}

// assertOnce checks that every ID in ids was stored exactly once and
// nothing else was.
func assertOnce(t *testing.T, copies map[string]int, ids []string) {
	t.Helper()
	twice := 0
	for _, c := range copies {
		if c > 1 {
			twice++
		}
	}
	assert.Zero(t, twice, "messages stored more than once")
	assert.Len(t, copies, len(ids), "messages stored")
	for _, id := range ids {
		if copies[id] != 1 {
			assert.Equal(t, 1, copies[id], "copies of %s", id)
			return
		}
	}
}

// TestRmqProxyOneEntryBatchStoredOnce is the regression test of issue 19's
// first finding: a RocketMQ 5 proxy answers a batch with ONE OK entry, and
// the producer read the other messages as unknown and sent them again (a
// fake of the proxy stored 39,565 copies of 20,000 SendAsync). With default
// options (batching on), 20,000 SendAsync and then 5,000 Send are each
// stored exactly once, counted by message ID on the server.
func TestRmqProxyOneEntryBatchStoredOnce(t *testing.T) {
	// Not in parallel: 25,000 sends whose count of copies holds only if no
	// attempt times out, which a loaded 2-core machine can make happen.
	nAsync, nSync := 20000, 5000
	if testing.Short() {
		nAsync, nSync = 2000, 500
	}
	ps := newProxyStore()
	srv := startProxy(t, ps)
	p, err := New(srv.Addr, WithProtocol(RocketMQ5), WithBatching(DefaultBatchLinger, DefaultBatchMessages, DefaultBatchBytes))
	require.NoError(t, err)
	ctx := context.Background()

	var wg sync.WaitGroup
	var failed atomic.Int64
	ids := make([]string, nAsync)
	offsets := make([]int64, nAsync)
	for i := range nAsync {
		m := &Message{Topic: "t", Body: []byte("x")}
		wg.Add(1)
		err := p.SendAsync(ctx, m, func(r *SendReceipt, err error) {
			defer wg.Done()
			if err != nil {
				failed.Add(1)
				return
			}
			ids[i], offsets[i] = r.MessageID, r.Offset
		})
		require.NoError(t, err)
	}
	wg.Wait()
	require.Zero(t, failed.Load(), "async sends failed")
	copies, requests, batches := ps.stored()
	assertOnce(t, copies, ids)
	assert.Positive(t, batches, "no request carried a batch (%d requests)", requests)
	seen := map[int64]bool{}
	for _, off := range offsets {
		seen[off] = true
	}
	assert.Len(t, seen, nAsync, "each message has its own offset (the batch's first + its index)")

	syncIDs := make([]string, nSync)
	errs := make(chan error, nSync)
	var next atomic.Int64
	var sg sync.WaitGroup
	for range 16 {
		sg.Add(1)
		go func() {
			defer sg.Done()
			for i := int(next.Add(1) - 1); i < nSync; i = int(next.Add(1) - 1) {
				r, err := p.Send(ctx, &Message{Topic: "t", Body: []byte("y")})
				if err != nil {
					errs <- err
					continue
				}
				syncIDs[i] = r.MessageID
			}
		}()
	}
	sg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, p.Close(ctx))
	copies, _, _ = ps.stored()
	assertOnce(t, copies, append(ids, syncIDs...))
}

// A batch refused whole by a proxy (a status alone, nothing stored: here
// local mode's 50001 with the broker's [PC_SYNCHRONIZED] remark, then
// cluster mode's 42900 [TIMEOUT_CLEAN_QUEUE]) is a throttle of every
// message of it: each is retried and stored once, and the throttle events
// carry the reason read from the tag.
func TestRmqProxyBusyBatchRetriedOnce(t *testing.T) {
	// Not in parallel: 25,000 sends whose count of copies holds only if no
	// attempt times out, which a loaded 2-core machine can make happen.
	ps := newProxyStore()
	var refused atomic.Int64
	ps.refuse = func(req *rocketmqv2.SendMessageRequest) *rocketmqv2.Status {
		switch refused.Add(1) {
		case 1:
			return &rocketmqv2.Status{Code: rocketmqv2.Code_INTERNAL_SERVER_ERROR, Message: "[PC_SYNCHRONIZED]broker busy, start flow control for a while"}
		case 2:
			return &rocketmqv2.Status{Code: rocketmqv2.Code_TOO_MANY_REQUESTS, Message: "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: 205ms, size of queue: 9"}
		}
		return nil
	}
	srv := startProxy(t, ps)
	var mu sync.Mutex
	reasons := map[brokercode.Reason]int{}
	obs := Observer(func(e Event) {
		if e.Kind == EventThrottle {
			mu.Lock()
			reasons[e.Reason]++
			mu.Unlock()
		}
	})
	p, err := New(srv.Addr, WithProtocol(RocketMQ5), WithObserver(obs), WithPacing(false),
		WithThrottleSchedule(backoff.Constant(time.Millisecond)))
	require.NoError(t, err)
	ctx := context.Background()
	const n = 64
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		require.NoError(t, p.SendAsync(ctx, &Message{Topic: "t", Body: []byte("x")}, func(r *SendReceipt, err error) {
			defer wg.Done()
			if assert.NoError(t, err) {
				ids[i] = r.MessageID
			}
		}))
	}
	wg.Wait()
	require.NoError(t, p.Close(ctx))
	copies, _, _ := ps.stored()
	assertOnce(t, copies, ids)
	mu.Lock()
	defer mu.Unlock()
	assert.Positive(t, reasons[brokercode.ReasonStorageLoad], "[PC_SYNCHRONIZED] as 50001: %v", reasons)
	assert.Positive(t, reasons[brokercode.ReasonSendRate], "[TIMEOUT_CLEAN_QUEUE] as 42900: %v", reasons)
	assert.Zero(t, reasons[brokercode.ReasonUnspecified], "%v", reasons)
}

// TestRmqProxyStoredThen50001: with one request in 20 stored and then
// answered 50001 (the outcome unknown to the producer), nothing is lost
// (each message stored or handed back), and the copies stored more than
// once are no more than the unknown outcomes the producer met: a batch's
// 50001 is every message's, each retried alone once.
func TestRmqProxyStoredThen50001(t *testing.T) {
	// Not in parallel: 25,000 sends whose count of copies holds only if no
	// attempt times out, which a loaded 2-core machine can make happen.
	ps := newProxyStore()
	ps.lose = func(n int) bool { return n%20 == 3 } // from the 3rd: a short run has a few requests
	srv := startProxy(t, ps)
	var unknown atomic.Int64
	obs := Observer(func(e Event) {
		if e.Kind == EventRetry && e.Why == FailedUnknown {
			unknown.Add(1)
		}
	})
	p, err := New(srv.Addr, WithProtocol(RocketMQ5), WithObserver(obs))
	require.NoError(t, err)
	ctx := context.Background()
	n := 5000
	if testing.Short() {
		n = 1000
	}
	var wg sync.WaitGroup
	var stored, handedBack atomic.Int64
	for range n {
		wg.Add(1)
		require.NoError(t, p.SendAsync(ctx, &Message{Topic: "t", Body: []byte("x")}, func(_ *SendReceipt, err error) {
			defer wg.Done()
			var se *SendError
			switch {
			case err == nil:
				stored.Add(1)
			case errors.As(err, &se):
				handedBack.Add(1)
				if se.Last == FailedUnknown {
					unknown.Add(1)
				}
			default:
				t.Errorf("send failed without a SendError: %v", err)
			}
		}))
	}
	wg.Wait()
	require.NoError(t, p.Close(ctx))
	assert.Equal(t, int64(n), stored.Load()+handedBack.Load(), "every message stored or handed back")
	copies, _, _ := ps.stored()
	extra := 0
	for _, c := range copies {
		extra += c - 1
	}
	assert.Positive(t, unknown.Load(), "the script answered some 50001")
	assert.LessOrEqual(t, int64(extra), unknown.Load(), "extra copies against unknown outcomes")
	t.Logf("%d messages: %d stored, %d handed back, %d unknown outcomes, %d extra copies", n, stored.Load(), handedBack.Load(), unknown.Load(), extra)
}
