package producer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/rocketry-go/rocketry/brokercode"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// These are the acceptance tests of the producer against the real test
// broker on 127.0.0.1:0.

// consumerClient dials b's consumer service for the test.
func consumerClient(t testing.TB, b *broker.Broker) rocketryv1.ConsumerServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(b.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return rocketryv1.NewConsumerServiceClient(cc)
}

// hintOf is the RetryInfo delay an attempt's error carried.
func hintOf(err error) time.Duration {
	return classifyError(err).Hint
}

// TestBacklogThrottling: sends to a topic over its backlog limit wait on the
// connection backoff and are stored once a consumer drains the topic.
func TestBacklogThrottling(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, broker.WithThrottle(broker.Throttle{MaxBacklog: 20, BacklogLowWater: 10, StorageLoadWindow: time.Millisecond}))
	cons := consumerClient(t, b)
	ctx := context.Background()
	// A consumer group makes the backlog count.
	if _, err := cons.ReceiveMessages(ctx, &rocketryv1.ReceiveMessagesRequest{Topic: "orders", Group: "g", AutoCommit: true}); err != nil {
		t.Fatalf("ReceiveMessages() = %v", err)
	}
	sched := msSchedule(t)
	rec := &recorder{}
	var throttles atomic.Int32
	drain := make(chan struct{})
	var drainOnce sync.Once
	obs := func(e Event) {
		rec.observe(e)
		if e.Kind == EventThrottle && throttles.Add(1) >= 12 {
			drainOnce.Do(func() { close(drain) })
		}
	}
	p := newTestProducer(t, b.Addr(), WithThrottleSchedule(sched), WithRand(nil), WithMaxAttempts(30), WithObserver(obs))
	for i := range 21 { // over MaxBacklog: throttling starts
		if _, err := p.Send(ctx, msg("orders")); err != nil {
			t.Fatalf("Send(%d) = %v", i, err)
		}
	}
	// The consumer drains once the producer has been throttled a while.
	drained := make(chan error, 1)
	go func() {
		<-drain
		for {
			r, err := cons.ReceiveMessages(ctx, &rocketryv1.ReceiveMessagesRequest{Topic: "orders", Group: "g", MaxMessages: 100, AutoCommit: true})
			if err != nil || len(r.GetMessages()) == 0 {
				drained <- err
				return
			}
		}
	}()
	var wg sync.WaitGroup
	receipts := make([]*SendReceipt, 4)
	errs := make([]error, 4)
	for i := range receipts {
		wg.Go(func() { receipts[i], errs[i] = p.Send(ctx, msg("orders")) })
	}
	wg.Wait()
	if err := <-drained; err != nil {
		t.Fatalf("drain: %v", err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("throttled Send(%d) = %v; want stored after the drain", i, err)
		}
		if receipts[i].Attempts < 2 {
			t.Errorf("throttled Send(%d) took %d attempts; want >= 2", i, receipts[i].Attempts)
		}
	}
	// Per message: every throttle was BACKLOG, and retry n of the throttle
	// schedule chose the schedule's delay n, or the broker's longer hint.
	byID := map[string][]Event{}
	for _, e := range rec.events() {
		byID[e.MessageID] = append(byID[e.MessageID], e)
	}
	checked := 0
	for id, evs := range byID {
		n := 0
		for _, e := range evs {
			switch e.Kind {
			case EventThrottle:
				if e.Reason != brokercode.ReasonBacklog || e.Code != brokercode.TooManyRequests {
					t.Errorf("%s: throttle event %+v; want 530 BACKLOG", id, e)
				}
			case EventRetry:
				n++
				want, _ := sched.Delay(n, nil)
				if e.Why != Throttled || (e.Delay != want && e.Delay < hintOf(e.Err)) {
					t.Errorf("%s: retry %d = %s after %v; want throttled after %v (or the hint %v)", id, n, e.Why, e.Delay, want, hintOf(e.Err))
				}
				if e.Delay == want {
					checked++
				}
			}
		}
	}
	if checked == 0 {
		t.Errorf("no retry chose the schedule's own delay")
	}
	st := b.Stats()
	t.Logf("throttled %v, retries on the schedule's delay %d, stored %d", st.GetThrottled(), checked, st.GetStored())
	if st.GetStored() != 25 {
		t.Errorf("broker stored %d; want 25", st.GetStored())
	}
}

// TestFailureGoesToAnotherBroker: with one broker of three down, a failed
// attempt is retried at once on another broker, and every message is
// stored.
func TestFailureGoesToAnotherBroker(t *testing.T) {
	bs := []*broker.Broker{brokertest.Start(t), brokertest.Start(t), brokertest.Start(t)}
	down := bs[1].Addr()
	target := bs[0].Addr() + "," + down + "," + bs[2].Addr()
	rec := &recorder{}
	p := newTestProducer(t, target, WithObserver(rec.observe), WithRand(nil))
	bs[1].Stop()
	const n = 30
	for i := range n {
		r, err := p.Send(context.Background(), msg("t"))
		if err != nil {
			t.Fatalf("Send(%d) = %v", i, err)
		}
		if r.Attempts > 2 {
			t.Errorf("Send(%d) took %d attempts; want at most 2", i, r.Attempts)
		}
	}
	var prev Event
	moved := 0
	for _, e := range rec.events() {
		if e.Kind == EventAttempt && prev.Kind == EventRetry && prev.MessageID == e.MessageID {
			if prev.Why == Throttled || prev.Delay != 0 || prev.Endpoint != down || e.Endpoint == down {
				t.Errorf("retry %+v then attempt on %s; want an immediate failure retry from %s to another broker", prev, e.Endpoint, down)
			}
			moved++
		}
		prev = e
	}
	if moved == 0 {
		t.Errorf("no send was retried on another broker")
	}
	stored := len(bs[0].Messages("t")) + len(bs[2].Messages("t"))
	if stored != n {
		t.Errorf("brokers stored %d; want %d", stored, n)
	}
	t.Logf("%d of %d sends moved from the stopped broker to another", moved, n)
}

// TestBrokerRefusals covers the attempt count, 4xx, transactional and
// deadline rules against the broker.
func TestBrokerRefusals(t *testing.T) {
	// Not parallel: its 50 ms attempts must reach the broker before they
	// time out, which a loaded machine does not promise.
	tests := []struct {
		name          string
		brokerOpts    []broker.Option
		faults        broker.Faults
		opts          []Option
		body          int
		transactional bool
		timeout       time.Duration
		wantKind      error
		wantAttempts  int
		wantCode      brokercode.Code
		anyCode       bool // a timeout: the broker's answer may race the client's timer
	}{
		{name: "attempts counted with the first", faults: broker.Faults{Unavailable: true}, opts: []Option{WithMaxAttempts(4)},
			wantKind: ErrAttemptsExhausted, wantAttempts: 4, wantCode: brokercode.Unavailable},
		{name: "413 is not retried", brokerOpts: []broker.Option{broker.WithMaxBodyBytes(10)}, body: 100,
			wantKind: ErrNotRetryable, wantAttempts: 1, wantCode: brokercode.MessageTooLarge},
		{name: "transactional not retried after a timeout", faults: broker.Faults{BlackholeRate: 1}, transactional: true, opts: []Option{WithAttemptTimeout(50 * time.Millisecond)},
			wantKind: ErrNotRetryable, wantAttempts: 1, anyCode: true},
		{name: "non-transactional retried after a timeout", faults: broker.Faults{BlackholeRate: 1}, opts: []Option{WithAttemptTimeout(50 * time.Millisecond)},
			wantKind: ErrAttemptsExhausted, wantAttempts: 3, anyCode: true},
		{name: "transactional not retried after INTERNAL", faults: broker.Faults{InternalRate: 1}, transactional: true,
			wantKind: ErrNotRetryable, wantAttempts: 1, wantCode: brokercode.InternalError},
		{name: "deadline too short for the throttle wait", brokerOpts: []broker.Option{broker.WithThrottle(broker.Throttle{MaxSendRate: 1})},
			opts: []Option{WithThrottleSchedule(backoff.Constant(time.Hour))}, timeout: 5 * time.Second,
			wantKind: ErrDeadlineTooShort, wantAttempts: 1, wantCode: brokercode.TooManyRequests},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := brokertest.Start(t, tt.brokerOpts...)
			p := newTestProducer(t, b.Addr(), tt.opts...)
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			if tt.name == "deadline too short for the throttle wait" {
				// The one token of the second is spent: the next send is throttled.
				if _, err := p.Send(ctx, msg("t")); err != nil {
					t.Fatal(err)
				}
			}
			before := b.Stats().GetSendRequests()
			b.SetFaults(tt.faults)
			m := &Message{Topic: "t", Body: make([]byte, tt.body), Transactional: tt.transactional}
			_, err := p.Send(ctx, m)
			var se *SendError
			if !errors.As(err, &se) || !errors.Is(err, tt.wantKind) {
				t.Fatalf("Send() = %v; want a *SendError wrapping %v", err, tt.wantKind)
			}
			if se.Attempts != tt.wantAttempts || (!tt.anyCode && se.Code != tt.wantCode) {
				t.Errorf("Send() = %d attempts, code %v; want %d, %v", se.Attempts, se.Code, tt.wantAttempts, tt.wantCode)
			}
			if tt.wantCode != 0 && CodeOf(err) != tt.wantCode {
				t.Errorf("CodeOf(%v) = %v; want %v", err, CodeOf(err), tt.wantCode)
			}
			b.SetFaults(broker.Faults{})
			if got := b.Stats().GetSendRequests() - before; got != int64(tt.wantAttempts) {
				t.Errorf("broker saw %d requests; want %d", got, tt.wantAttempts)
			}
		})
	}
}

// TestExhaustionIntoFallbackAndSink: a message whose attempts are spent
// goes to the fallback, or else to the dead-letter sink, and Send says so.
func TestExhaustionIntoFallbackAndSink(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, broker.WithFaults(broker.Faults{Unavailable: true}))
	t.Run("fallback", func(t *testing.T) {
		var got []*Message
		var mu sync.Mutex
		p := newTestProducer(t, b.Addr(), WithFallback(func(m *Message, err error) {
			if !errors.Is(err, ErrAttemptsExhausted) {
				t.Errorf("fallback err = %v; want ErrAttemptsExhausted", err)
			}
			mu.Lock()
			got = append(got, m)
			mu.Unlock()
		}))
		m := msg("t")
		_, err := p.Send(context.Background(), m)
		var se *SendError
		if !errors.As(err, &se) || !se.DeadLettered || se.Attempts != 3 {
			t.Fatalf("Send() = %v; want a spooled *SendError after 3 attempts", err)
		}
		if len(got) != 1 || got[0] != m {
			t.Errorf("fallback got %v; want the message once", got)
		}
	})
	t.Run("sink", func(t *testing.T) {
		sink := newMemSink()
		p, err := New(b.Addr(), WithProtocol(RocketryV1), WithDeadLetterSink(sink))
		if err != nil {
			t.Fatal(err)
		}
		m := msg("t")
		_, err = p.Send(context.Background(), m)
		var se *SendError
		if !errors.As(err, &se) || !se.DeadLettered {
			t.Fatalf("Send() = %v; want a spooled *SendError", err)
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatalf("Close() = %v", err)
		}
		r := sink.get(m.ID)
		if sink.len() != 1 || r == nil {
			t.Fatalf("sink holds %d records, %v; want 1, of %s", sink.len(), r, m.ID)
		}
		// 503 with the broker's detail: known not stored, so no endpoint.
		if r.Message != m || r.Attempts != 3 || r.Code != brokercode.Unavailable || r.Err == "" || r.MaybeStoredAt != "" || r.SendError != se {
			t.Errorf("dead letter = %+v; want ID %s, 3 attempts, 503, an error, no endpoint, the send's error", r, m.ID)
		}
	})
}

// TestAsyncUnderFaults: 10,000 async sends against a broker answering 20%
// of calls INTERNAL and restarted twice. Every callback runs exactly once,
// the broker stores each ID at most once, and every message is stored or
// spooled.
func TestAsyncUnderFaults(t *testing.T) {
	n := 10000
	if testing.Short() {
		n = 2000
	}
	b := brokertest.Start(t, broker.WithFaults(broker.Faults{InternalRate: 0.2}), broker.WithSeed(1))
	sink := newMemSink()
	p, err := New(b.Addr(), WithProtocol(RocketryV1), WithDeadLetterSink(sink), WithMaxInFlight(256), WithFailureSchedule(backoff.Constant(time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	calls := make([]atomic.Int32, n)
	ids := make([]string, n)
	var stored, failed atomic.Int32
	var restarts sync.WaitGroup
	var done atomic.Int32
	restartAt := map[int32]bool{int32(n / 4): true, int32(n * 2 / 3): true}
	for i := range n {
		m := &Message{ID: fmt.Sprintf("m-%06d", i), Topic: "t", Body: []byte("x")}
		ids[i] = m.ID
		err := p.SendAsync(context.Background(), m, func(r *SendReceipt, err error) {
			calls[i].Add(1)
			if err != nil {
				failed.Add(1)
			} else {
				stored.Add(1)
			}
			if restartAt[done.Add(1)] {
				restarts.Go(func() {
					if err := b.Restart(); err != nil {
						t.Errorf("Restart() = %v", err)
					}
				})
			}
		})
		if err != nil {
			t.Fatalf("SendAsync(%d) = %v", i, err)
		}
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	restarts.Wait()
	for i := range calls {
		if c := calls[i].Load(); c != 1 {
			t.Fatalf("callback of message %d ran %d times; want 1", i, c)
		}
	}
	seen := map[string]int{}
	for _, rm := range b.Messages("t") {
		seen[rm.GetMessage().GetMessageId()]++
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("broker stored %s %d times; want 1", id, c)
		}
	}
	lost := 0
	for _, id := range ids {
		if seen[id] == 0 && sink.get(id) == nil {
			lost++
		}
	}
	if lost != 0 || int(failed.Load()) != sink.len() || sink.puts != sink.len() {
		t.Errorf("lost %d messages, %d failed, %d spooled (%d puts); want 0 lost and every failure spooled once", lost, failed.Load(), sink.len(), sink.puts)
	}
	st := b.Stats()
	t.Logf("%d async sends, 2 restarts: callbacks %d (each once), stored %d (distinct IDs %d, duplicates refused %d), failed and spooled %d, lost %d; broker requests %d, faults %v",
		n, stored.Load()+failed.Load(), stored.Load(), len(seen), st.GetDuplicates(), sink.len(), lost, st.GetSendRequests(), st.GetFaults())
}

// TestSlowBrokerBounded: many async sends against a slow broker keep at
// most MaxInFlight sends (and goroutines) in flight, and memory bounded.
// ROCKETRY_LONG=1 makes it 100,000 sends. The "broker" case runs the test
// broker, whose store grows with every message; the "stub" case a server
// that only delays its answers, so the live heap is the producer's and
// gRPC's: once all n sends are in, it is at most 1.5 times (plus 2 MiB) what
// it was after the first 2×MaxInFlight, measured in the same run.
func TestSlowBrokerBounded(t *testing.T) {
	n, inflight := 10000, 1000 // a leak of 1 KB a send shows as 10 MiB
	switch {
	case os.Getenv("ROCKETRY_LONG") == "1":
		n = 100000
	case testing.Short():
		n = 4 * inflight // past the 2×MaxInFlight the heap is first read at
	}
	t.Run("stub", func(t *testing.T) {
		warm, end := slowSends(t, startStub(t, &stub{latency: slowLatency, noStore: true}), n, inflight)
		assert.LessOrEqual(t, end, warm+warm/2+2<<20,
			"live heap after %d sends %.1f MiB; after %d sends %.1f MiB", n, float64(end)/(1<<20), 2*inflight, float64(warm)/(1<<20))
	})
	t.Run("broker", func(t *testing.T) {
		b := brokertest.Start(t, broker.WithFaults(broker.Faults{Latency: slowLatency}))
		slowSends(t, b.Addr(), n, inflight)
	})
}

const slowLatency = 20 * time.Millisecond

// slowSends makes n async sends to addr with inflight in flight, checks
// the bounds of sends and goroutines, and returns the live heap (after a
// GC) once 2×inflight sends are in (warm: the connection's buffers grown),
// and once all n are.
func slowSends(t *testing.T, addr string, n, inflight int) (warm, end uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseHeap := ms.HeapAlloc
	p, err := New(addr, WithProtocol(RocketryV1), WithMaxInFlight(inflight))
	if err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	var peakG int
	var peakInFlight int64
	var peakSlots int
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			peakG = max(peakG, runtime.NumGoroutine())
			peakInFlight = max(peakInFlight, p.sends.n.Load()&^closedBit)
			peakSlots = max(peakSlots, len(p.async.slots))
		}
	}()
	var ok, bad atomic.Int64
	cb := func(_ *SendReceipt, err error) {
		if err != nil {
			bad.Add(1)
		} else {
			ok.Add(1)
		}
	}
	live := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	start := time.Now()
	for i := range n {
		if i == 2*inflight {
			warm = live()
		}
		if err := p.SendAsync(context.Background(), msg("slow"), cb); err != nil {
			t.Fatalf("SendAsync(%d) = %v", i, err)
		}
	}
	// Every send is in: at most MaxInFlight in flight, the rest done.
	end = live()
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	close(stop)
	<-sampled
	elapsed := time.Since(start)
	if ok.Load() != int64(n) {
		t.Errorf("stored %d of %d (%d failed)", ok.Load(), n, bad.Load())
	}
	// Counted sends: those holding a slot, the one SendAsync waiting for
	// room, and the few that gave back their slot but have not returned.
	if peakSlots > inflight || peakInFlight > int64(inflight)+10 {
		t.Errorf("peak slots taken = %d, sends counted = %d; want at most MaxInFlight %d (+10)", peakSlots, peakInFlight, inflight)
	}
	// One goroutine per send in flight, and the server's one per call (it
	// runs in this process): a small multiple of MaxInFlight, whatever n is.
	if limit := base + 2*inflight + 100; peakG > limit {
		t.Errorf("peak goroutines = %d; want at most %d (MaxInFlight %d)", peakG, limit, inflight)
	}
	t.Logf("%d async sends, MaxInFlight %d, latency %v: %v; peak slots taken %d, sends counted %d; goroutines %d before, peak %d (server's included); live heap %.1f MiB before, %.1f MiB after %d sends, %.1f MiB after all",
		n, inflight, slowLatency, elapsed.Round(time.Millisecond), peakSlots, peakInFlight, base, peakG,
		float64(baseHeap)/(1<<20), float64(warm)/(1<<20), 2*inflight, float64(end)/(1<<20))
	return warm, end
}
