package producer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// This file holds issue 19's acceptance tests against the bundled broker
// itself, on its faithful apache.rocketmq.v2 face (the Apache proxy in
// cluster mode: one entry per batch, the broker picks the queue, no
// deduplication by message ID), with the producer's default options. The
// broker's own count of copies (Stats: Copies, StoredTwice) is the
// measure: a message sent again is stored again there.

// faithfulRun is what one run of SendAsync and Send against the broker saw.
type faithfulRun struct {
	ok      map[string]bool // IDs the producer reported stored
	failed  int             // messages handed back to their caller or callback
	unknown atomic.Int64    // unknown outcomes met: retried, or the last of a failed send
}

// runFaithful sends nAsync messages with SendAsync and then nSync with Send
// (from 16 goroutines) to topic "t" on b, with default options and an
// observer that counts the unknown outcomes the producer retried.
func runFaithful(t *testing.T, b *broker.Broker, nAsync, nSync int) *faithfulRun {
	t.Helper()
	run := &faithfulRun{ok: make(map[string]bool, nAsync+nSync)}
	obs := Observer(func(e Event) {
		if e.Kind == EventRetry && e.Why == FailedUnknown {
			run.unknown.Add(1)
		}
	})
	p, err := New(b.Addr(), WithProtocol(RocketMQ5), WithObserver(obs))
	require.NoError(t, err)
	ctx := context.Background()

	var mu sync.Mutex
	done := func(r *SendReceipt, err error) {
		mu.Lock()
		defer mu.Unlock()
		var se *SendError
		switch {
		case err == nil:
			assert.False(t, run.ok[r.MessageID], "message %s reported stored twice", r.MessageID)
			run.ok[r.MessageID] = true
		case errors.As(err, &se):
			run.failed++
			if se.Last == FailedUnknown {
				run.unknown.Add(1)
			}
		default:
			t.Errorf("send failed without a SendError: %v", err)
		}
	}
	var wg sync.WaitGroup
	for range nAsync {
		wg.Add(1)
		require.NoError(t, p.SendAsync(ctx, &Message{Topic: "t", Body: []byte("x")}, func(r *SendReceipt, err error) {
			defer wg.Done()
			done(r, err)
		}))
	}
	wg.Wait()

	var next atomic.Int64
	for range 16 {
		wg.Go(func() {
			for next.Add(1) <= int64(nSync) {
				done(p.Send(ctx, &Message{Topic: "t", Body: []byte("y")}))
			}
		})
	}
	wg.Wait()
	require.NoError(t, p.Close(ctx))
	return run
}

// copiesByID counts the copies of each message ID the broker stored in t.
func copiesByID(b *broker.Broker, topic string) map[string]int {
	copies := map[string]int{}
	for _, m := range b.Messages(topic) {
		copies[m.GetMessage().GetMessageId()]++
	}
	return copies
}

// faithfulCounts are issue 19's acceptance numbers, divided by div, and a
// tenth of them under -short. Under -race the full 25,000 take seconds, most
// of it the 5,000 Send, one request each; -short keeps a quick run quick.
func faithfulCounts(div int) (nAsync, nSync int) {
	if testing.Short() {
		div *= 10
	}
	return 20000 / div, 5000 / div
}

// TestFaithfulFaceStoredOnce is issue 19's first acceptance test: against
// the bundled broker's faithful face with default options and no faults,
// 20,000 SendAsync and 5,000 Send (2,000 and 500 under -short) are each
// stored exactly once by the broker's own count.
func TestFaithfulFaceStoredOnce(t *testing.T) {
	// Not in parallel: 25,000 sends whose count of copies holds only if no
	// attempt times out, which a loaded 2-core machine can make happen.
	nAsync, nSync := faithfulCounts(1)
	n := nAsync + nSync
	b := brokertest.Start(t)
	run := runFaithful(t, b, nAsync, nSync)

	assert.Zero(t, run.failed, "sends failed")
	assert.Len(t, run.ok, n, "messages reported stored")
	s := b.Stats()
	assert.Equal(t, int64(n), s.GetStored(), "broker stored")
	assert.Zero(t, s.GetCopies(), "broker copies")
	assert.Zero(t, s.GetStoredTwice(), "broker ids stored twice")
	copies := copiesByID(b, "t")
	assert.Len(t, copies, n, "distinct IDs stored")
	for id := range run.ok {
		if !assert.Equal(t, 1, copies[id], "copies of %s", id) {
			break
		}
	}
	assert.Positive(t, b.SendRequests(broker.ProtocolRocketMQV2), "requests on apache.rocketmq.v2")
	assert.Equal(t, int64(n), b.SendRequests(broker.ProtocolRocketMQV2), "one request a message: RocketMQ5 batches only with WithBatching")
	t.Logf("%d messages in %d requests: stored %d, copies %d", n, s.GetSendRequests(), s.GetStored(), s.GetCopies())
}

// TestFaithfulFaceStoredThen50001 is issue 19's second acceptance test,
// on half the numbers (10,000 SendAsync, 2,500 Send; a tenth under -short):
// with 5% of sends stored by the broker and then answered 50001 (a proxy
// whose answer failed after the broker wrote the messages), nothing is lost
// (every message the producer reported stored is stored, every other one
// was handed back to its caller), and the copies the broker stored are no
// more than the unknown outcomes the producer met.
func TestFaithfulFaceStoredThen50001(t *testing.T) {
	// Not in parallel: 25,000 sends whose count of copies holds only if no
	// attempt times out, which a loaded 2-core machine can make happen.
	nAsync, nSync := faithfulCounts(2)
	n := nAsync + nSync
	b := brokertest.Start(t, broker.WithSeed(19), broker.WithFaults(broker.Faults{StoredInternalRate: 0.05}))
	run := runFaithful(t, b, nAsync, nSync)

	assert.Equal(t, n, len(run.ok)+run.failed, "every message reported stored or handed back")
	copies := copiesByID(b, "t")
	lost := 0
	for id := range run.ok {
		if copies[id] == 0 {
			lost++
		}
	}
	assert.Zero(t, lost, "messages reported stored that the broker does not hold")
	s := b.Stats()
	assert.Positive(t, s.GetFaults()["stored_internal"], "the broker answered some sends 50001 after storing them")
	assert.Positive(t, run.unknown.Load(), "the producer met unknown outcomes")
	assert.LessOrEqual(t, s.GetCopies(), run.unknown.Load(), "broker copies against unknown outcomes")
	t.Logf("%d messages: %d reported stored, %d handed back; broker: stored %d, copies %d (ids stored twice %d), %d requests answered 50001 after storing; producer: %d unknown outcomes",
		n, len(run.ok), run.failed, s.GetStored(), s.GetCopies(), s.GetStoredTwice(), s.GetFaults()["stored_internal"], run.unknown.Load())
}
