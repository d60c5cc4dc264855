package producer

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
)

// ids of the stored (visible) messages of topic on b.
func visibleIDs(b *broker.Broker, topic string) []string {
	var out []string
	for _, m := range b.Messages(topic) {
		out = append(out, m.GetMessage().GetMessageId())
	}
	return out
}

// TestTransactionCommitRollback: a transaction's half messages are not
// visible until Commit; Rollback drops them; an ended transaction refuses
// more; a transactional message outside a transaction is refused.
func TestTransactionCommitRollback(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, broker.WithQueues(1))
	p := newTestProducer(t, b.Addr(), WithProtocol(RocketMQ5))
	ctx := context.Background()

	tx, err := p.BeginTransaction(ctx)
	require.NoError(t, err)
	m := &Message{Topic: "orders", Keys: []string{"k"}, Body: []byte("paid")}
	r, err := tx.Send(ctx, m)
	require.NoError(t, err)
	assert.True(t, m.Transactional)
	assert.NotEmpty(t, r.TransactionID)
	assert.Empty(t, visibleIDs(b, "orders"), "visible before the commit")
	require.Len(t, b.HalfMessages("orders"), 1)
	require.NoError(t, tx.Commit(ctx))
	assert.Equal(t, []string{m.ID}, visibleIDs(b, "orders"), "visible after the commit")
	_, err = tx.Send(ctx, &Message{Topic: "orders", Body: []byte("x")})
	assert.ErrorIs(t, err, ErrTransactionEnded)
	assert.ErrorIs(t, tx.Commit(ctx), ErrTransactionEnded)
	assert.ErrorIs(t, tx.Rollback(ctx), ErrTransactionEnded)

	tx2, err := p.BeginTransaction(ctx)
	require.NoError(t, err)
	for i := range 2 {
		_, err := tx2.Send(ctx, &Message{Topic: "orders", Body: []byte{byte(i)}})
		require.NoError(t, err)
	}
	require.Len(t, b.HalfMessages("orders"), 2)
	require.NoError(t, tx2.Rollback(ctx))
	assert.Empty(t, b.HalfMessages("orders"))
	assert.Equal(t, []string{m.ID}, visibleIDs(b, "orders"), "nothing rolled back is visible")

	_, err = p.Send(ctx, &Message{Topic: "orders", Body: []byte("x"), Transactional: true})
	assert.ErrorIs(t, err, ErrInvalidMessage)
	assert.ErrorContains(t, err, "BeginTransaction")
	_, err = tx2.Send(ctx, nil)
	assert.ErrorIs(t, err, ErrTransactionEnded)
	tx3, err := p.BeginTransaction(ctx)
	require.NoError(t, err)
	_, err = tx3.Send(ctx, &Message{Topic: "orders", Body: []byte("x"), MessageGroup: "g"})
	assert.ErrorIs(t, err, ErrInvalidMessage, "a half message with a group")
	assert.NoError(t, tx3.Commit(ctx), "a transaction without messages commits nothing")
}

// TestTransactionChecker: transactions left open are resolved by the
// checker when the broker's check asks; a checker that does not know
// leaves it to the broker, which rolls it back after its last check.
func TestTransactionChecker(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, broker.WithQueues(1), broker.WithTransactionCheck(20*time.Millisecond, 3))
	var mu sync.Mutex
	asked := map[string]int{}
	check := func(ctx context.Context, m *Message) TransactionResolution {
		mu.Lock()
		defer mu.Unlock()
		asked[m.Keys[0]]++
		assert.True(t, m.Transactional)
		assert.Equal(t, "orders", m.Topic)
		// The properties as sent; the broker's own apart.
		assert.Equal(t, map[string]string{"p": "v"}, m.Properties)
		tc, ok := TransactionCheckFrom(ctx)
		if assert.True(t, ok, "TransactionCheckFrom(the checker's ctx)") {
			assert.NotEmpty(t, tc.TransactionID)
			assert.Equal(t, tc.TransactionID, tc.SystemProperties["__transactionId__"])
			assert.Equal(t, strconv.Itoa(asked[m.Keys[0]]), tc.SystemProperties["TRANSACTION_CHECK_TIMES"], "the broker's count of its checks")
		}
		switch m.Keys[0] {
		case "commit":
			return TransactionCommit
		case "rollback":
			return TransactionRollback
		}
		return TransactionUnknown
	}
	var checkEvents atomic.Int32
	p := newTestProducer(t, b.Addr(), WithProtocol(RocketMQ5), WithTransactionChecker(check), WithObserver(func(e Event) {
		if (e.Kind == EventCommit || e.Kind == EventRollback) && e.Check && e.Err == nil {
			checkEvents.Add(1)
		}
	}))
	ctx := context.Background()
	ids := map[string]string{}
	for _, key := range []string{"commit", "rollback", "unknown"} {
		tx, err := p.BeginTransaction(ctx)
		require.NoError(t, err)
		m := &Message{Topic: "orders", Keys: []string{key}, Properties: map[string]string{"p": "v"}, Body: []byte(key)}
		_, err = tx.Send(ctx, m)
		require.NoError(t, err)
		ids[key] = m.ID
	}
	require.Eventually(t, func() bool { return len(b.HalfMessages("orders")) == 0 }, 20*time.Second, 5*time.Millisecond,
		"every transaction ended by the check")
	assert.Equal(t, []string{ids["commit"]}, visibleIDs(b, "orders"))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 1, asked["commit"])
	assert.Equal(t, 1, asked["rollback"])
	assert.Equal(t, 3, asked["unknown"], "asked at each of the broker's checks")
	assert.Eventually(t, func() bool { return checkEvents.Load() == 2 }, 20*time.Second, 5*time.Millisecond,
		"the observer's events of the checks' answers")
}

// TestTransactionSendNotRetriedAfterUnknownOutcome: a half message stored
// but answered 50001 is not sent again; the error says the check resolves
// it, and the checker's answer commits it.
func TestTransactionSendNotRetriedAfterUnknownOutcome(t *testing.T) {
	t.Parallel()
	var sends atomic.Int32
	b := brokertest.Start(t, broker.WithQueues(1), broker.WithTransactionCheck(20*time.Millisecond, 5),
		broker.WithFaults(broker.Faults{StoredInternalRate: 1}),
		broker.WithSendObserver(func(broker.SendRecord) { sends.Add(1) }))
	p := newTestProducer(t, b.Addr(), WithProtocol(RocketMQ5), WithMaxAttempts(5),
		WithTransactionChecker(func(context.Context, *Message) TransactionResolution { return TransactionCommit }))
	ctx := context.Background()
	tx, err := p.BeginTransaction(ctx)
	require.NoError(t, err)
	m := &Message{Topic: "orders", Body: []byte("x")}
	_, err = tx.Send(ctx, m)
	var te *TransactionError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, "send", te.Op)
	assert.True(t, te.Unresolved)
	assert.Equal(t, 1, te.Attempts)
	assert.ErrorIs(t, err, ErrNotRetryable)
	assert.ErrorContains(t, err, "not retried")
	assert.ErrorContains(t, err, "WithTransactionChecker")
	assert.Equal(t, int32(1), sends.Load(), "attempts the broker saw")

	err = tx.Commit(ctx)
	require.ErrorAs(t, err, &te, "a commit that cannot end the unknown send")
	assert.True(t, te.Unresolved)
	assert.Equal(t, m.ID, te.MessageID)
	require.Eventually(t, func() bool { return len(visibleIDs(b, "orders")) == 1 }, 20*time.Second, 5*time.Millisecond,
		"committed by the checker's answer")
}

// TestTransactionEndRetried: an EndTransaction that fails is retried.
func TestTransactionEndRetried(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, broker.WithQueues(1))
	var fails atomic.Int32
	fails.Store(2)
	fail := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == rocketmqv2.MessagingService_EndTransaction_FullMethodName && fails.Add(-1) >= 0 {
			return status.Error(codes.Unavailable, "injected")
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	p := newTestProducer(t, b.Addr(), WithProtocol(RocketMQ5), WithFailureSchedule(msSchedule(t)),
		WithDialOptions(grpc.WithUnaryInterceptor(fail)))
	ctx := context.Background()
	tx, err := p.BeginTransaction(ctx)
	require.NoError(t, err)
	m := &Message{Topic: "orders", Body: []byte("x")}
	_, err = tx.Send(ctx, m)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	assert.Equal(t, []string{m.ID}, visibleIDs(b, "orders"))
	assert.Equal(t, int32(-1), fails.Load(), "two failed EndTransaction calls, then one that went through")
}

// TestTransactionEndedByTheCheck: a commit of a transaction the broker
// rolled back after its last check says so.
func TestTransactionEndedByTheCheck(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, broker.WithQueues(1), broker.WithTransactionCheck(10*time.Millisecond, 1))
	p := newTestProducer(t, b.Addr(), WithProtocol(RocketMQ5))
	ctx := context.Background()
	tx, err := p.BeginTransaction(ctx)
	require.NoError(t, err)
	_, err = tx.Send(ctx, &Message{Topic: "orders", Body: []byte("x")})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(b.HalfMessages("orders")) == 0 }, 20*time.Second, 5*time.Millisecond)
	err = tx.Commit(ctx)
	require.ErrorIs(t, err, ErrTransactionNotFound)
	var te *TransactionError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, "commit", te.Op)
	assert.False(t, te.Unresolved, "the broker ended it")
	assert.Equal(t, 1, te.Attempts, "not found is not retried")
	assert.Empty(t, visibleIDs(b, "orders"))
}

// TestRecall: a timed message's receipt has a recall handle; recalled, the
// message is gone; a due message or a bad handle is refused clearly.
func TestRecall(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, broker.WithQueues(1))
	p := newTestProducer(t, b.Addr(), WithProtocol(RocketMQ5))
	ctx := context.Background()
	m := &Message{Topic: "timers", Body: []byte("later"), DeliveryTime: time.Now().Add(time.Hour)}
	r, err := p.Send(ctx, m)
	require.NoError(t, err)
	require.NotEmpty(t, r.RecallHandle)
	id, err := p.Recall(ctx, "timers", r.RecallHandle)
	require.NoError(t, err)
	assert.Equal(t, m.ID, id)
	assert.Empty(t, b.Messages("timers"), "the recalled message is gone")

	now, err := p.Send(ctx, &Message{Topic: "timers", Body: []byte("now")})
	require.NoError(t, err)
	assert.Empty(t, now.RecallHandle, "a message that is not timed")

	_, err = p.Recall(ctx, "timers", "bm90IGEgaGFuZGxl")
	assert.ErrorIs(t, err, ErrRecallHandle)
	var se *RocketMQStatusError
	assert.ErrorAs(t, err, &se)
	_, err = p.Recall(ctx, "timers", "")
	assert.ErrorIs(t, err, ErrRecallHandle)
	_, err = p.Recall(ctx, " ", r.RecallHandle)
	assert.ErrorContains(t, err, "topic is empty")

	soon := &Message{Topic: "timers", Body: []byte("soon"), DeliveryTime: time.Now().Add(20 * time.Millisecond)}
	r, err = p.Send(ctx, soon)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ms := b.Messages("timers")
		return len(ms) == 2 && ms[1].GetOffset() >= 0
	}, 20*time.Second, 5*time.Millisecond, "the timed message is due")
	_, err = p.Recall(ctx, "timers", r.RecallHandle)
	assert.ErrorIs(t, err, ErrRecallTooLate)
}

// TestTransactionsNeedRocketMQ5: over rocketry.v1 the RocketMQ 5 calls
// and option are refused clearly.
func TestTransactionsNeedRocketMQ5(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t)
	p := newTestProducer(t, b.Addr())
	_, err := p.BeginTransaction(context.Background())
	assert.ErrorIs(t, err, ErrNotRocketMQ5)
	assert.ErrorContains(t, err, "Transactional")
	_, err = p.Recall(context.Background(), "t", "h")
	assert.ErrorIs(t, err, ErrNotRocketMQ5)
	_, err = New(b.Addr(), WithProtocol(RocketryV1), WithTransactionChecker(func(context.Context, *Message) TransactionResolution { return TransactionCommit }))
	var oe *OptionError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "WithTransactionChecker", oe.Option)
	_, err = New(b.Addr(), WithProtocol(RocketMQ5), WithTransactionChecker(nil))
	assert.ErrorAs(t, err, &oe)
	assert.True(t, errors.As(err, &oe) && oe.Option == "WithTransactionChecker")
}

// holdCall is a client interceptor (WithDialOptions) that holds the calls
// of one method until release, or until their context ends, and watches
// NotifyClientTermination, which Close sends once it closes the transport.
type holdCall struct {
	method   string
	entered  chan struct{} // closed when a held call starts
	release  chan struct{}
	returned chan struct{} // closed when the held call is over
	notified chan struct{} // closed at NotifyClientTermination
	// underHeld: NotifyClientTermination came while the held call was in
	// flight (Close closed the transport under it).
	underHeld                          atomic.Bool
	enterOnce, relOnce, retOnce, nOnce sync.Once
}

func newHoldCall(method string) *holdCall {
	return &holdCall{method: method, entered: make(chan struct{}), release: make(chan struct{}),
		returned: make(chan struct{}), notified: make(chan struct{})}
}

func (h *holdCall) releaseNow() { h.relOnce.Do(func() { close(h.release) }) }

func (h *holdCall) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	switch method {
	case h.method:
		h.enterOnce.Do(func() { close(h.entered) })
		defer h.retOnce.Do(func() { close(h.returned) })
		select {
		case <-h.release:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	case rocketmqv2.MessagingService_NotifyClientTermination_FullMethodName:
		select {
		case <-h.entered:
			select {
			case <-h.returned:
			default:
				h.underHeld.Store(true)
			}
		default:
		}
		h.nOnce.Do(func() { close(h.notified) })
		h.releaseNow()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// awaitCloseWaiting returns once p's Close has started and counts one call
// in flight, which it then waits for; or, when Close does not wait for it,
// once Close sends NotifyClientTermination.
func awaitCloseWaiting(t *testing.T, p *Producer, h *holdCall) {
	t.Helper()
	for i := 0; ; i++ {
		select {
		case <-h.notified:
			return
		default:
		}
		if p.sends.n.Load() == closedBit+1 {
			return
		}
		require.Less(t, i, 60_000, "Close neither waits for the call nor closes the transport")
		time.Sleep(time.Millisecond)
	}
}

// TestEndsInFlightAtClose is the regression test of the review's item on
// Commit, Rollback and Recall racing Close: they were not counted as sends
// in flight, so Close closed the transport under an EndTransaction (the
// broker then rolls back, after its checks, a message the caller meant to
// commit) or a recall. A Commit or a Recall in flight when Close starts
// now ends, done, before Close closes the transport and returns.
func TestEndsInFlightAtClose(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, method string
		// start makes what the call needs on p, and returns the call and
		// a check of the broker once it is done.
		start func(t *testing.T, p *Producer, b *broker.Broker) (call func() error, check func())
	}{{
		name: "Commit", method: rocketmqv2.MessagingService_EndTransaction_FullMethodName,
		start: func(t *testing.T, p *Producer, b *broker.Broker) (func() error, func()) {
			tx, err := p.BeginTransaction(context.Background())
			require.NoError(t, err)
			m := &Message{Topic: "orders", Body: []byte("paid")}
			_, err = tx.Send(context.Background(), m)
			require.NoError(t, err)
			return func() error { return tx.Commit(context.Background()) }, func() {
				assert.Equal(t, []string{m.ID}, visibleIDs(b, "orders"), "committed")
				assert.Empty(t, b.HalfMessages("orders"))
			}
		},
	}, {
		name: "Recall", method: rocketmqv2.MessagingService_RecallMessage_FullMethodName,
		start: func(t *testing.T, p *Producer, b *broker.Broker) (func() error, func()) {
			r, err := p.Send(context.Background(), &Message{Topic: "timers", Body: []byte("later"), DeliveryTime: time.Now().Add(time.Hour)})
			require.NoError(t, err)
			return func() error {
					_, err := p.Recall(context.Background(), "timers", r.RecallHandle)
					return err
				}, func() {
					assert.Empty(t, b.Messages("timers"), "recalled")
				}
		},
	}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := brokertest.Start(t, broker.WithQueues(1))
			h := newHoldCall(c.method)
			p := newTestProducer(t, b.Addr(), WithProtocol(RocketMQ5), WithDialOptions(grpc.WithChainUnaryInterceptor(h.intercept)))
			call, check := c.start(t, p, b)
			var callErr error
			callDone := make(chan struct{})
			go func() {
				defer close(callDone)
				callErr = call()
			}()
			<-h.entered
			closeErr := make(chan error, 1)
			var callFirst bool
			go func() {
				err := p.Close(context.Background())
				select {
				case <-callDone:
					callFirst = true
				default:
				}
				closeErr <- err
			}()
			awaitCloseWaiting(t, p, h)
			h.releaseNow()
			require.NoError(t, <-closeErr)
			<-callDone
			require.NoError(t, callErr)
			assert.True(t, callFirst, "the call was done before Close returned")
			assert.False(t, h.underHeld.Load(), "Close closed the transport under the call in flight")
			check()
		})
	}
}

// TestCommitCancelledByClose: when Close's ctx ends before a Commit in
// flight does, Close cancels it (its error wraps ErrClosed, the message
// unresolved: the broker's check resolves it), and closes the transport
// only after it.
func TestCommitCancelledByClose(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, broker.WithQueues(1))
	h := newHoldCall(rocketmqv2.MessagingService_EndTransaction_FullMethodName)
	p := newTestProducer(t, b.Addr(), WithProtocol(RocketMQ5), WithDialOptions(grpc.WithChainUnaryInterceptor(h.intercept)))
	tx, err := p.BeginTransaction(context.Background())
	require.NoError(t, err)
	m := &Message{Topic: "orders", Body: []byte("paid")}
	_, err = tx.Send(context.Background(), m)
	require.NoError(t, err)
	commitErr := make(chan error, 1)
	go func() { commitErr <- tx.Commit(context.Background()) }()
	<-h.entered

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, p.Close(ctx), context.Canceled)
	err = <-commitErr
	require.ErrorIs(t, err, ErrClosed)
	var te *TransactionError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, m.ID, te.MessageID)
	assert.True(t, te.Unresolved)
	assert.False(t, h.underHeld.Load(), "Close closed the transport under the Commit in flight")
	assert.Len(t, b.HalfMessages("orders"), 1, "left to the broker's check")
	assert.Empty(t, visibleIDs(b, "orders"))
}

// TestEndsAfterClose: once Close has started, Commit, Rollback and Recall
// end nothing and return ErrClosed (a transaction's error names each
// message not ended, unresolved).
func TestEndsAfterClose(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, broker.WithQueues(1))
	var ends atomic.Int32
	p := newTestProducer(t, b.Addr(), WithProtocol(RocketMQ5), WithDialOptions(grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method == rocketmqv2.MessagingService_EndTransaction_FullMethodName || method == rocketmqv2.MessagingService_RecallMessage_FullMethodName {
				ends.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		})))
	ctx := context.Background()
	tx, err := p.BeginTransaction(ctx)
	require.NoError(t, err)
	m := &Message{Topic: "orders", Body: []byte("paid")}
	_, err = tx.Send(ctx, m)
	require.NoError(t, err)
	empty, err := p.BeginTransaction(ctx)
	require.NoError(t, err)
	r, err := p.Send(ctx, &Message{Topic: "timers", Body: []byte("later"), DeliveryTime: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.NoError(t, p.Close(ctx))

	err = tx.Commit(ctx)
	require.ErrorIs(t, err, ErrClosed)
	var te *TransactionError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, TransactionError{Op: "commit", MessageID: m.ID, TransactionID: te.TransactionID, Unresolved: true, Err: ErrClosed}, *te)
	assert.NotEmpty(t, te.TransactionID)
	assert.ErrorIs(t, tx.Rollback(ctx), ErrTransactionEnded)
	assert.Equal(t, ErrClosed, empty.Rollback(ctx), "a transaction without messages")
	_, err = p.Recall(ctx, "timers", r.RecallHandle)
	assert.Equal(t, ErrClosed, err)
	assert.Zero(t, ends.Load(), "no call made after Close")
	assert.Len(t, b.HalfMessages("orders"), 1)
}
