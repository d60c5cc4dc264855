package producer

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
)

// groupOrder is, per message group of topic, the IDs the broker stored, in
// queue order, and the queues they are on.
func groupOrder(t *testing.T, b *broker.Broker, topic string) (ids map[string][]string, queues map[string]map[int32]bool) {
	t.Helper()
	ms := b.Messages(topic)
	slices.SortStableFunc(ms, func(x, y *rocketryv1.ReceivedMessage) int {
		if x.GetQueueId() != y.GetQueueId() {
			return int(x.GetQueueId() - y.GetQueueId())
		}
		return int(x.GetOffset() - y.GetOffset())
	})
	ids, queues = map[string][]string{}, map[string]map[int32]bool{}
	for _, m := range ms {
		g := m.GetMessage().GetMessageGroup()
		ids[g] = append(ids[g], m.GetMessage().GetMessageId())
		if queues[g] == nil {
			queues[g] = map[int32]bool{}
		}
		queues[g][m.GetQueueId()] = true
	}
	return ids, queues
}

// TestFifoOrderUnderFaultsAndThrottling: several groups sent sync and async
// over both protocols to the bundled broker, which answers INTERNAL, drops
// connections and throttles BACKLOG: every group is stored on one queue in
// send order, with nothing missing; nothing twice on rocketry.v1, and on
// RocketMQ 5 a copy stored twice only after an unknown outcome.
func TestFifoOrderUnderFaultsAndThrottling(t *testing.T) {
	t.Parallel()
	for _, proto := range []Protocol{RocketryV1, RocketMQ5} {
		for _, async := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/async=%v", proto, async), func(t *testing.T) {
				testFifoOrder(t, proto, async)
			})
		}
	}
}

func testFifoOrder(t *testing.T, proto Protocol, async bool) {
	const groups, perGroup, topic = 4, 25, "orders"
	b := brokertest.Start(t, broker.WithQueues(4),
		broker.WithThrottle(broker.Throttle{MaxBacklog: 8, BacklogLowWater: 4, StorageLoadWindow: time.Millisecond}))
	cons := consumerClient(t, b)
	ctx := context.Background()
	_, err := cons.ReceiveMessages(ctx, &rocketryv1.ReceiveMessagesRequest{Topic: topic, Group: "c", AutoCommit: true})
	require.NoError(t, err) // the consumer group makes the backlog count
	// StoredInternalRate stores and then answers INTERNAL (50001 over
	// RocketMQ 5): a retry of it stores a copy there, as a real broker
	// would, and the rocketry.v1 face answers it as a duplicate.
	require.NoError(t, b.SetFaults(broker.Faults{InternalRate: 0.07, StoredInternalRate: 0.08, DropRate: 0.03}))

	// The consumer drains only once a send was throttled, so that every
	// run is throttled.
	throttled := make(chan struct{})
	var once sync.Once
	rec := &recorder{}
	obs := func(e Event) {
		rec.observe(e)
		if e.Kind == EventThrottle {
			once.Do(func() { close(throttled) })
		}
	}
	p := newTestProducer(t, b.Addr(), WithProtocol(proto), WithMaxAttempts(1000), WithObserver(obs),
		WithThrottleSchedule(backoff.Constant(time.Millisecond)), WithAttemptTimeout(2*time.Second))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-throttled:
		case <-stop:
			return
		}
		tk := time.NewTicker(2 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				_, _ = cons.ReceiveMessages(ctx, &rocketryv1.ReceiveMessagesRequest{Topic: topic, Group: "c", MaxMessages: 4, AutoCommit: true})
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	sent := map[string][]string{}
	mk := func(g, i int) *Message {
		m := &Message{Topic: topic, MessageGroup: fmt.Sprintf("g%d", g), Body: fmt.Appendf(nil, "g%d-%d", g, i)}
		return m
	}
	if async {
		var done sync.WaitGroup
		var failed atomic.Int32
		for i := range perGroup {
			for g := range groups {
				m := mk(g, i)
				done.Add(1)
				require.NoError(t, p.SendAsync(ctx, m, func(_ *SendReceipt, err error) {
					if err != nil {
						failed.Add(1)
						t.Errorf("SendAsync(%s) = %v", m.Body, err)
					}
					done.Done()
				}))
				sent[m.MessageGroup] = append(sent[m.MessageGroup], m.ID)
			}
		}
		done.Wait()
		require.Zero(t, failed.Load())
	} else {
		var mu sync.Mutex
		var senders sync.WaitGroup
		for g := range groups {
			senders.Add(1)
			go func() {
				defer senders.Done()
				for i := range perGroup {
					m := mk(g, i)
					if _, err := p.Send(ctx, m); err != nil {
						t.Errorf("Send(%s) = %v", m.Body, err)
						return
					}
					mu.Lock()
					sent[m.MessageGroup] = append(sent[m.MessageGroup], m.ID)
					mu.Unlock()
				}
			}()
		}
		senders.Wait()
	}
	require.False(t, t.Failed())

	unknown := map[string]bool{} // messages with an unknown outcome
	var throttles int
	for _, e := range rec.events() {
		switch {
		case e.Kind == EventRetry && e.Why == FailedUnknown:
			unknown[e.MessageID] = true
		case e.Kind == EventThrottle:
			throttles++
		}
	}
	require.Positive(t, throttles, "the run was throttled")
	stored, queues := groupOrder(t, b, topic)
	require.Len(t, stored, groups)
	var copies int
	for g, want := range sent {
		got := stored[g]
		assert.Len(t, queues[g], 1, "group %s is on one queue", g)
		if proto == RocketryV1 {
			assert.Equal(t, want, got, "group %s: stored order = send order, nothing missing or twice", g)
			continue
		}
		// RocketMQ 5 stores a re-sent message again; a group's next
		// message is sent only after the outcome, so a copy follows its
		// original at once.
		assert.Equal(t, want, slices.Compact(slices.Clone(got)), "group %s: stored order = send order", g)
		for i := 1; i < len(got); i++ {
			if got[i] == got[i-1] {
				copies++
				assert.True(t, unknown[got[i]], "copy of %s follows an unknown outcome", got[i])
			}
		}
	}
	if proto == RocketMQ5 {
		// 8% of 100 requests or more: none is a chance of 0.92^100, 0.02%.
		assert.Positive(t, copies, "copies stored after StoredInternalRate's answers")
		t.Logf("%d copies stored, after %d unknown outcomes", copies, len(unknown))
	}
}

// fifoStub is a rocketry.v1 MessagingService that answers each message by
// answer (nil: stored) and keeps what it stored, in order.
type fifoStub struct {
	rocketryv1.UnimplementedMessagingServiceServer
	answer func(ctx context.Context, m *rocketryv1.Message) error

	mu     sync.Mutex
	stored []string // bodies
	sizes  []int    // messages per request
}

func (s *fifoStub) SendMessage(ctx context.Context, req *rocketryv1.SendMessageRequest) (*rocketryv1.SendMessageResponse, error) {
	s.mu.Lock()
	s.sizes = append(s.sizes, len(req.GetMessages()))
	s.mu.Unlock()
	out := &rocketryv1.SendMessageResponse{}
	for _, m := range req.GetMessages() {
		if s.answer != nil {
			if err := s.answer(ctx, m); err != nil {
				return nil, err
			}
		}
		s.mu.Lock()
		s.stored = append(s.stored, string(m.GetBody()))
		s.mu.Unlock()
		out.Results = append(out.Results, &rocketryv1.SendResult{MessageId: m.GetMessageId()})
	}
	return out, nil
}

func (s *fifoStub) storedOf(prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, b := range s.stored {
		if strings.HasPrefix(b, prefix) {
			out = append(out, b)
		}
	}
	return out
}

func startFifoStub(t *testing.T, s *fifoStub) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rocketryv1.RegisterMessagingServiceServer(srv, s)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// result is one async send's answer.
type result struct {
	body string
	err  error
}

// TestFifoThrottledGroupDoesNotHoldOthers: a group whose messages are
// throttled holds its own later messages, and no other group's.
func TestFifoThrottledGroupDoesNotHoldOthers(t *testing.T) {
	t.Parallel()
	var open atomic.Bool
	s := &fifoStub{answer: func(_ context.Context, m *rocketryv1.Message) error {
		if m.GetMessageGroup() == "slow" && !open.Load() {
			return err530
		}
		return nil
	}}
	addr := startFifoStub(t, s)
	// Pacing off: the pacer slows a topic that is throttled, for every
	// group; this test is about the order of the groups.
	p := newTestProducer(t, addr, WithMaxAttempts(1_000_000), WithPacing(false),
		WithThrottleSchedule(backoff.Constant(time.Millisecond)))
	ctx := context.Background()
	results := make(chan result, 32)
	send := func(g string, i int) {
		m := &Message{Topic: "t", MessageGroup: g, Body: fmt.Appendf(nil, "%s-%d", g, i)}
		require.NoError(t, p.SendAsync(ctx, m, func(_ *SendReceipt, err error) { results <- result{string(m.Body), err} }))
	}
	send("slow", 0)
	send("slow", 1)
	for i := range 10 {
		send("fast", i)
	}
	for range 10 {
		r := <-results
		require.NoError(t, r.err)
		require.True(t, strings.HasPrefix(r.body, "fast-"), "%s answered while slow is throttled", r.body)
	}
	assert.Empty(t, s.storedOf("slow"))
	open.Store(true)
	for range 2 {
		require.NoError(t, (<-results).err)
	}
	assert.Equal(t, []string{"slow-0", "slow-1"}, s.storedOf("slow"))
	want := make([]string, 10)
	for i := range want {
		want[i] = fmt.Sprintf("fast-%d", i)
	}
	assert.Equal(t, want, s.storedOf("fast"))
}

// TestFifoGroupFailureFailsTheQueued: when a message of a group fails for
// good, the messages of its group waiting behind it fail in order with
// ErrGroupFailed, wrapping the first failure, and go to the dead-letter
// sink; a send made after the failure was reported goes on. Other groups
// are not touched; no FIFO message is batched.
func TestFifoGroupFailureFailsTheQueued(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	held := make(chan struct{})
	var heldOnce sync.Once
	s := &fifoStub{answer: func(ctx context.Context, m *rocketryv1.Message) error {
		switch string(m.GetBody()) {
		case "g-0":
			heldOnce.Do(func() { close(held) })
			<-hold
		case "g-2":
			return err400
		}
		return nil
	}}
	addr := startFifoStub(t, s)
	sink := newMemSink()
	p := newTestProducer(t, addr, WithDeadLetterSink(sink), WithBatching(time.Second, 16, 1<<20), WithMaxInFlight(64))
	ctx := context.Background()
	results := make(chan result, 16)
	ids := map[string]string{}
	send := func(body string) {
		g, _, _ := strings.Cut(body, "-")
		m := &Message{Topic: "t", MessageGroup: g, Body: []byte(body)}
		require.NoError(t, p.SendAsync(ctx, m, func(_ *SendReceipt, err error) { results <- result{body, err} }))
		ids[body] = m.ID
	}
	send("g-0")
	<-held // g-0 is in flight: the others wait behind it
	for i := 1; i < 6; i++ {
		send(fmt.Sprintf("g-%d", i))
	}
	send("h-0")
	close(hold)
	got := map[string]error{}
	for range 7 {
		r := <-results
		got[r.body] = r.err
	}
	for _, b := range []string{"g-0", "g-1", "h-0"} {
		assert.NoError(t, got[b], b)
	}
	require.ErrorIs(t, got["g-2"], ErrNotRetryable)
	assert.NotErrorIs(t, got["g-2"], ErrGroupFailed)
	for _, b := range []string{"g-3", "g-4", "g-5"} {
		err := got[b]
		require.ErrorIs(t, err, ErrGroupFailed, b)
		assert.ErrorIs(t, err, ErrNotRetryable, "%s wraps the first failure", b)
		assert.Contains(t, err.Error(), ids["g-2"], "%s names the first failure", b)
		var se *SendError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, ids[b], se.MessageID)
		assert.Zero(t, se.Attempts)
		assert.True(t, se.DeadLettered)
		assert.NotNil(t, sink.get(ids[b]), "%s kept in the dead-letter sink", b)
	}
	assert.NotNil(t, sink.get(ids["g-2"]))

	// Made after the failure was reported: it goes on.
	send("g-6")
	require.NoError(t, (<-results).err)
	assert.Equal(t, []string{"g-0", "g-1", "g-6"}, s.storedOf("g-"))
	s.mu.Lock()
	for _, n := range s.sizes {
		assert.Equal(t, 1, n, "a FIFO message is never batched")
	}
	s.mu.Unlock()
}

// TestFifoSyncGivesUpWaiting: a sync Send whose context ends while it
// waits for its turn fails at once, with its context's error and no
// attempt; a send made after it goes on, behind the one in flight.
func TestFifoSyncGivesUpWaiting(t *testing.T) {
	hold := make(chan struct{})
	held := make(chan struct{})
	var heldOnce sync.Once
	s := &fifoStub{answer: func(ctx context.Context, m *rocketryv1.Message) error {
		if string(m.GetBody()) == "g-0" {
			heldOnce.Do(func() { close(held) })
			<-hold
		}
		return nil
	}}
	addr := startFifoStub(t, s)
	p := newTestProducer(t, addr)
	first := make(chan error, 1)
	go func() {
		_, err := p.Send(context.Background(), &Message{Topic: "t", MessageGroup: "g", Body: []byte("g-0")})
		first <- err
	}()
	<-held
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := p.Send(ctx, &Message{Topic: "t", MessageGroup: "g", Body: []byte("g-1")})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var se *SendError
	require.ErrorAs(t, err, &se)
	assert.Zero(t, se.Attempts)

	after := make(chan error, 1)
	require.NoError(t, p.SendAsync(context.Background(), &Message{Topic: "t", MessageGroup: "g", Body: []byte("g-2")},
		func(_ *SendReceipt, err error) { after <- err }))
	close(hold)
	require.NoError(t, <-first)
	require.NoError(t, <-after)
	assert.Equal(t, []string{"g-0", "g-2"}, s.storedOf("g-"))
}

// TestFifoRetriesStayOnTheGroupsBroker: with two brokers answering
// INTERNAL (known not stored, which moves a normal message's retry to the
// other broker), every message of a group is stored on one broker, in
// order; each attempt is a request of its own (never batched).
func TestFifoRetriesStayOnTheGroupsBroker(t *testing.T) {
	t.Parallel()
	bs := brokertest.StartCluster(t, 2)
	for _, b := range bs {
		require.NoError(t, b.SetFaults(broker.Faults{InternalRate: 0.3}))
	}
	rec := &recorder{}
	p := newTestProducer(t, bs[0].Addr()+","+bs[1].Addr(), WithMaxAttempts(1000), WithObserver(rec.observe))
	ctx := context.Background()
	var done sync.WaitGroup
	sent := map[string][]string{}
	for i := range 20 {
		for _, g := range []string{"a", "b", "c"} {
			m := &Message{Topic: "t", MessageGroup: g, Body: []byte("x")}
			done.Add(1)
			require.NoError(t, p.SendAsync(ctx, m, func(_ *SendReceipt, err error) {
				assert.NoError(t, err, "message %d of %s", i, g)
				done.Done()
			}))
			sent[g] = append(sent[g], m.ID)
		}
	}
	done.Wait()
	var requests int64
	for g, want := range sent {
		var on []int
		for i, b := range bs {
			got, _ := groupOrder(t, b, "t")
			if len(got[g]) > 0 {
				on = append(on, i)
				assert.Equal(t, want, got[g], "group %s in send order", g)
			}
		}
		assert.Len(t, on, 1, "group %s on one broker", g)
	}
	for _, b := range bs {
		requests += b.Stats().GetSendRequests()
	}
	attempts := 0
	for _, e := range rec.events() {
		if e.Kind == EventAttempt {
			attempts++
		}
	}
	assert.Equal(t, int64(attempts), requests, "one request per attempt: nothing batched")
	assert.Greater(t, attempts, 60, "the brokers failed some attempts")
}
