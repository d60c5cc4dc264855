package producer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
)

// TestTransactionsUnderFaults runs transactions against a broker that
// throttles, fails sends without storing them (50001), stores sends and
// answers 50001 all the same, and drops connections, while a third of the
// callers "crash" before ending their transaction. From the broker's
// records of every attempt it checks: no half message is sent again after
// an attempt whose outcome the producer could not know (only throttled
// attempts are followed by others); every transaction ends, committed or
// rolled back by its caller or by the broker's check through the checker;
// every message meant to be committed whose half message the broker held
// is delivered, once, and nothing meant to be rolled back is.
func TestTransactionsUnderFaults(t *testing.T) {
	t.Parallel()
	const topic, n = "tx-faults", 120
	var mu sync.Mutex
	records := map[string][]broker.SendRecord{}
	b := brokertest.Start(t, broker.WithQueues(2), broker.WithSeed(7),
		broker.WithTransactionCheck(30*time.Millisecond, 50),
		broker.WithFaults(broker.Faults{InternalRate: 0.08, StoredInternalRate: 0.08, DropRate: 0.03}),
		broker.WithThrottle(broker.Throttle{MaxSendRate: 60}),
		broker.WithSendObserver(func(r broker.SendRecord) {
			mu.Lock()
			records[r.MessageID] = append(records[r.MessageID], r)
			mu.Unlock()
		}))
	commit := func(key string) bool { // the outcome each transaction is meant to have
		var i int
		_, _ = fmt.Sscanf(key, "m-%d", &i)
		return i%2 == 0
	}
	check := func(_ context.Context, m *Message) TransactionResolution {
		if commit(m.Keys[0]) {
			return TransactionCommit
		}
		return TransactionRollback
	}
	p := newTestProducer(t, b.Addr(), WithProtocol(RocketMQ5), WithMaxAttempts(20), WithPacing(false),
		WithThrottleSchedule(msSchedule(t)), WithFailureSchedule(msSchedule(t)), WithTransactionChecker(check))

	ids := make([]string, n)
	var unresolvedSends int
	var wg sync.WaitGroup
	work := make(chan int)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				key := fmt.Sprintf("m-%d", i)
				tx, err := p.BeginTransaction(context.Background())
				if !assert.NoError(t, err) {
					continue
				}
				m := &Message{Topic: topic, Keys: []string{key}, Body: []byte(key)}
				_, err = tx.Send(context.Background(), m)
				mu.Lock()
				ids[i] = m.ID
				var te *TransactionError
				if errors.As(err, &te) && te.Unresolved {
					unresolvedSends++
				}
				mu.Unlock()
				if i%3 == 1 {
					continue // the caller "crashed": the check ends it
				}
				if commit(key) {
					_ = tx.Commit(context.Background())
				} else {
					_ = tx.Rollback(context.Background())
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	require.Eventually(t, func() bool { return len(b.HalfMessages(topic)) == 0 }, 30*time.Second, 10*time.Millisecond,
		"every transaction ended")

	visible := map[string]int{}
	for _, m := range b.Messages(topic) {
		visible[m.GetMessage().GetMessageId()]++
	}
	mu.Lock()
	defer mu.Unlock()
	var held, throttled, unsent int
	for i, id := range ids {
		key := fmt.Sprintf("m-%d", i)
		recs := records[id]
		if len(recs) == 0 { // every attempt failed before it left (a dropped connection)
			unsent++
			assert.Zero(t, visible[id], "%s: never sent, delivered", key)
			continue
		}
		for j, r := range recs[:len(recs)-1] {
			assert.Equal(t, broker.SendThrottled, r.Result, "%s: attempt %d of %d was %s %s, and was followed by another", key, j+1, len(recs), r.Result, r.Reason)
			throttled++
		}
		last := recs[len(recs)-1]
		stored := last.Result == broker.SendStored || last.Reason == "stored_internal"
		if stored {
			held++
		}
		switch {
		case stored && commit(key):
			assert.Equal(t, 1, visible[id], "%s: committed, delivered once", key)
		default:
			assert.Zero(t, visible[id], "%s: not to be delivered (stored %v, commit %v)", key, stored, commit(key))
		}
	}
	t.Logf("%d transactions: %d half messages held, %d sends with an unknown outcome, %d throttled attempts retried, %d sends that never reached the broker",
		n, held, unresolvedSends, throttled, unsent)
	assert.Positive(t, unresolvedSends, "sends with an unknown outcome (the faults)")
	assert.Positive(t, throttled, "throttled attempts")
}
