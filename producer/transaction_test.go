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
