package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/rocketry-go/rocketry/producer"
)

// Regression tests for what the chaos suite found, each named after it.

// TestChaos_RestartTwiceInARow: a Restart right after another one, before
// the broker's serve loop had put the new server in place, returned
// ErrNotServing ("returned by Restart when the broker was never started")
// though the broker was serving. The chaos schedule's back-to-back restarts
// hit it a few times per run.
func TestChaos_RestartTwiceInARow(t *testing.T) {
	b := brokertest.Start(t)
	for i := range 50 {
		if err := b.Restart(); err != nil {
			t.Fatalf("Restart() #%d = %v; want nil", 2*i+1, err)
		}
		if err := b.Restart(); err != nil {
			t.Fatalf("Restart() #%d right after another = %v; want nil", 2*i+2, err)
		}
	}
	p, err := producer.New(b.Addr(), producer.WithProtocol(producer.RocketryV1), producer.WithMaxAttempts(5), producer.WithAttemptTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	if _, err := p.Send(context.Background(), &producer.Message{Topic: topic, Body: []byte("x")}); err != nil {
		t.Errorf("Send() after 100 restarts = %v; want nil", err)
	}
}

// attemptLog records the endpoint of every attempt, by message ID.
type attemptLog struct {
	mu       sync.Mutex
	attempts map[string][]string
	onRetry  func(producer.Event)
}

func (l *attemptLog) observe(e producer.Event) {
	switch e.Kind {
	case producer.EventAttempt:
		l.mu.Lock()
		if l.attempts == nil {
			l.attempts = map[string][]string{}
		}
		l.attempts[e.MessageID] = append(l.attempts[e.MessageID], e.Endpoint)
		l.mu.Unlock()
	case producer.EventRetry:
		if l.onRetry != nil {
			l.onRetry(e)
		}
	}
}

func (l *attemptLog) of(id string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.attempts[id]...)
}

// storedCount is how many times b stored id.
func storedCount(b *broker.Broker, id string) int {
	n := 0
	for _, rm := range b.Messages(topic) {
		if rm.GetMessage().GetMessageId() == id {
			n++
		}
	}
	return n
}

// waitStored waits up to 5 s for b to hold id.
func waitStored(b *broker.Broker, id string) bool {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for end := time.After(5 * time.Second); storedCount(b, id) == 0; {
		select {
		case <-tick.C:
		case <-end:
			return false
		}
	}
	return true
}

// sendUntilFirstAttemptAt sends messages until one's first attempt goes to
// endpoint (round robin: within a few), and returns it with its answer.
func sendUntilFirstAttemptAt(t *testing.T, p *producer.Producer, log *attemptLog, endpoint string, tx bool) (*producer.Message, *producer.SendReceipt, error) {
	t.Helper()
	for i := range 6 {
		m := &producer.Message{ID: fmt.Sprintf("%s-%d-%t", t.Name(), i, tx), Topic: topic, Body: []byte("x"), Transactional: tx}
		r, err := p.Send(context.Background(), m)
		if a := log.of(m.ID); len(a) > 0 && a[0] == endpoint {
			return m, r, err
		}
	}
	t.Fatalf("no first attempt went to %s", endpoint)
	return nil, nil, nil
}

// twoBrokersBehindProxy starts brokers A and B, a holdProxy in front of A,
// and a producer on "proxy,B" whose observer is log; the connections are
// warmed up.
func twoBrokersBehindProxy(t *testing.T, log *attemptLog) (a, b *broker.Broker, px *holdProxy, p *producer.Producer) {
	t.Helper()
	a = brokertest.Start(t)
	b = brokertest.Start(t)
	px = startHoldProxy(t, a.Addr())
	p, err := producer.New(px.Addr()+","+b.Addr(), producer.WithProtocol(producer.RocketryV1),
		producer.WithAttemptTimeout(time.Second), producer.WithMaxAttempts(4),
		producer.WithObserver(log.observe), producer.WithFallback(func(*producer.Message, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	for i := range 4 {
		if _, err := p.Send(context.Background(), &producer.Message{Topic: topic, Body: []byte{byte(i)}}); err != nil {
			t.Fatalf("warm-up Send() = %v", err)
		}
	}
	return a, b, px, p
}

// TestChaos_CrossBrokerDuplicateAfterTimeout: with several independent
// brokers, a retry after an unknown outcome (the attempt timed out, or its
// connection was lost, after the broker had stored the message) used to go
// to ANOTHER broker, which stored the message again: each broker
// deduplicates only its own log. The chaos suite measured it at 0.5% of
// messages with one broker of three down. Since d7e3dd1 the retry stays on
// the same broker, which answers "duplicate". Here broker A stores the
// message but its answer is held back past the attempt timeout, then
// released for the retry.
//
// A transactional message is not retried after the timeout: stored once,
// on A, and handed back as failed (its outcome is unknown).
func TestChaos_CrossBrokerDuplicateAfterTimeout(t *testing.T) {
	var px *holdProxy
	log := &attemptLog{onRetry: func(producer.Event) { px.held.Store(false) }}
	a, b, px, p := twoBrokersBehindProxy(t, log)

	px.held.Store(true)
	m, r, err := sendUntilFirstAttemptAt(t, p, log, px.Addr(), false)
	px.held.Store(false)
	if err != nil {
		t.Fatalf("Send(%s) = %v (attempts to %v); want a receipt", m.ID, err, log.of(m.ID))
	}
	if onA, onB := storedCount(a, m.ID), storedCount(b, m.ID); onA+onB != 1 || !r.Duplicate {
		t.Errorf("Send(%s) = %+v (attempts to %s), stored %d time(s) on A (answer held), %d on B; want stored once, the retry answered Duplicate",
			m.ID, *r, strings.Join(log.of(m.ID), " -> "), onA, onB)
	}

	px.held.Store(true)
	tm, _, terr := sendUntilFirstAttemptAt(t, p, log, px.Addr(), true)
	txOnA := waitStored(a, tm.ID)
	px.held.Store(false)
	if !errors.Is(terr, producer.ErrNotRetryable) || !txOnA || storedCount(b, tm.ID) != 0 {
		t.Errorf("transactional Send(%s) = %v, stored on A %t, on B %d; want ErrNotRetryable, stored on A only", tm.ID, terr, txOnA, storedCount(b, tm.ID))
	}
}

// TestChaos_FailoverAfterUnknownThenNotStored: the rule "fail over only
// when the message is known not stored" looks at the last answer only. A
// message whose first attempt on A had an unknown outcome (A stored it, the
// answer came too late) is retried on A; if A then answers 503 UNAVAILABLE
// (or 500) with its "nothing stored" detail, that is true of THAT attempt
// only, yet the producer fails over to B, which stores the message a second
// time. The chaos suite's "three brokers, one down" scenario hits this in
// every seed (0.5% of messages). Fix: once an attempt on an endpoint had an
// unknown outcome, keep the send on that endpoint (no failover for the rest
// of the send, except with WithFailoverOnUnknownOutcome).
func TestChaos_FailoverAfterUnknownThenNotStored(t *testing.T) {
	var px *holdProxy
	var a *broker.Broker
	var once sync.Once
	log := &attemptLog{onRetry: func(producer.Event) {
		once.Do(func() {
			a.SetFaults(broker.Faults{Unavailable: true}) // the next answer: 503, nothing stored
			px.held.Store(false)
		})
	}}
	a, b, px, p := twoBrokersBehindProxy(t, log)

	px.held.Store(true)
	m, _, err := sendUntilFirstAttemptAt(t, p, log, px.Addr(), false)
	px.held.Store(false)
	a.SetFaults(broker.Faults{})
	onA, onB := storedCount(a, m.ID), storedCount(b, m.ID)
	if onA+onB > 1 {
		msg := fmt.Sprintf("Send(%s) = %v; attempts to %s; stored on A %d time(s) (its answer held, then 503), on B %d; want stored once",
			m.ID, err, strings.Join(log.of(m.ID), " -> "), onA, onB)
		t.Error(msg)
	}
}

// TestChaos_TimeoutRetryOnOneBrokerIsDeduplicated: with one broker, a
// retry after an attempt whose answer came too late goes back to that
// broker, which answers "duplicate": the message is stored once and the
// receipt says Duplicate.
func TestChaos_TimeoutRetryOnOneBrokerIsDeduplicated(t *testing.T) {
	a := brokertest.Start(t)
	px := startHoldProxy(t, a.Addr())
	log := &attemptLog{onRetry: func(producer.Event) { px.held.Store(false) }}
	p, err := producer.New(px.Addr(), producer.WithProtocol(producer.RocketryV1), producer.WithAttemptTimeout(time.Second), producer.WithMaxAttempts(4), producer.WithObserver(log.observe))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	if _, err := p.Send(context.Background(), &producer.Message{Topic: topic, Body: []byte("warm-up")}); err != nil {
		t.Fatalf("warm-up Send() = %v", err)
	}
	px.held.Store(true)
	m := &producer.Message{ID: "late-answer", Topic: topic, Body: []byte("x")}
	r, err := p.Send(context.Background(), m)
	if err != nil {
		t.Fatalf("Send(%s) = %v; want a receipt", m.ID, err)
	}
	if got := storedCount(a, m.ID); got != 1 || r.Attempts < 2 || !r.Duplicate {
		t.Errorf("Send(%s) = %+v, stored %d times; want a retry answered Duplicate, stored once", m.ID, *r, got)
	}
}
