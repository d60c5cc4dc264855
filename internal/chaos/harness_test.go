package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/brokercode"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/internal/xrand"
	"github.com/rocketry-go/rocketry/producer"
	"github.com/rocketry-go/rocketry/producer/deadletter"
)

// topic is the topic every chaos message goes to.
const topic = "chaos"

// scenario is one chaos run. Everything random in it (the schedule, which
// messages go sync or async, the brokers' fault draws, the producer's
// jitter) comes from seed, so a run's sequence of faults is repeatable;
// only goroutine timing differs between two runs of one seed.
type scenario struct {
	name           string
	seed           uint64
	brokers        int           // live brokers
	down           int           // endpoints where nothing listens (a broker that is down)
	messages       int           // messages sent
	syncWorkers    int           // goroutines calling Send
	asyncShare     float64       // share of messages sent with SendAsync / TrySendAsync
	txShare        float64       // share of transactional messages
	fallback       bool          // WithFallback instead of a dead-letter store
	maxAttempts    int           // WithMaxAttempts
	attemptTimeout time.Duration // WithAttemptTimeout
	maxInFlight    int           // WithMaxInFlight
	tick           time.Duration // one schedule step per tick
	kinds          []faultKind   // what the schedule draws from
	replay         bool          // replay the store at the end, to every live broker (calm by then)
	proxied        bool          // each broker behind a holdProxy, for fHold steps
	failoverAlways bool          // WithFailoverOnUnknownOutcome (duplicates across brokers allowed)
	scheme         bool          // one target with a scheme, its resolver's answer changing (scheme_test.go)
}

// msgID is message i's ID; msgIndex parses it back.
func msgID(seed uint64, i int) string { return fmt.Sprintf("s%d-%06d", seed, i) }

func msgIndex(id string) int {
	k := strings.LastIndexByte(id, '-')
	n, err := strconv.Atoi(id[k+1:])
	if k < 0 || err != nil {
		return -1
	}
	return n
}

// deadAddr returns an address on 127.0.0.1 where nothing listens.
func deadAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// liveBroker is a broker of a run with its consumers.
type liveBroker struct {
	b           *broker.Broker
	px          *holdProxy // in front of b in proxied scenarios, else nil
	heldUntil   time.Time  // px holds answers until then (chaos's goroutine only)
	addr        string     // what the producer dials: b's address or its proxy's
	cc          *grpc.ClientConn
	pausedUntil atomic.Int64 // unix nanos: the draining consumer waits until then
	reset       chan struct{}
}

// consume runs two consumer groups on lb until ctx ends: "billing" drains
// the topic (except while paused, for backlog storms), "audit" reads too
// and, when told to, resets to offset 0 and re-reads the whole log (cold
// reads: storage-load storms).
func (lb *liveBroker) consume(ctx context.Context, wg *sync.WaitGroup) {
	c := rocketryv1.NewConsumerServiceClient(lb.cc)
	read := func(group string, n int32) int {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		r, err := c.ReceiveMessages(cctx, &rocketryv1.ReceiveMessagesRequest{Topic: topic, Group: group, MaxMessages: n, AutoCommit: true})
		if err != nil {
			return 0
		}
		return len(r.GetMessages())
	}
	pause := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if time.Now().UnixNano() < lb.pausedUntil.Load() {
				if !pause(2 * time.Millisecond) {
					return
				}
				continue
			}
			if read("billing", 256) < 256 && !pause(2*time.Millisecond) {
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			select {
			case <-lb.reset:
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				_, _ = c.ResetOffset(cctx, &rocketryv1.ResetOffsetRequest{Topic: topic, Group: "audit", Offset: 0})
				cancel()
			default:
			}
			if read("audit", 500) < 500 && !pause(3*time.Millisecond) {
				return
			}
		}
	}()
}

// runScenario runs sc and returns what happened. It stops every broker and
// connection it started before returning.
func runScenario(t *testing.T, sc scenario) *outcome {
	t.Helper()
	o := &outcome{messages: sc.messages, crossCauses: map[string]int{}, failKinds: map[string]int{}, brokerFaults: map[string]int64{}, throttled: map[string]int64{}}
	start := time.Now()

	var lbs []*liveBroker
	var addrs []string
	defer func() {
		for _, lb := range lbs {
			if lb.px != nil {
				lb.px.close() // before goleak looks, not at t's cleanup
			}
			lb.b.Stop()
			lb.cc.Close()
		}
	}()
	for i := range sc.brokers {
		b, err := broker.New(broker.WithSeed(int64(sc.seed)*31+int64(i)), broker.WithQueues(2))
		if err != nil {
			t.Fatalf("broker.New() = %v", err)
		}
		if err := b.Start("127.0.0.1:0"); err != nil {
			t.Fatalf("Start() = %v", err)
		}
		cc, err := grpc.NewClient(b.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Stop()
			t.Fatal(err)
		}
		lb := &liveBroker{b: b, addr: b.Addr(), cc: cc, reset: make(chan struct{}, 1)}
		if sc.proxied {
			lb.px = startHoldProxy(t, b.Addr())
			lb.addr = lb.px.Addr()
		}
		lbs = append(lbs, lb)
		addrs = append(addrs, lb.addr)
	}
	for range sc.down {
		// In the middle, so that round robin and failover both meet it.
		addrs = append(addrs[:1], append([]string{deadAddr(t)}, addrs[1:]...)...)
	}

	n := sc.messages
	callbacks := make([]atomic.Int32, n)
	backCalls := make([]atomic.Int32, n)
	var maxThrottleWait atomic.Int64
	var attMu sync.Mutex
	attempts := map[string][]attemptRec{} // id -> its attempts, in order

	throttle, err := backoff.NewConnection(backoff.Config{BaseDelay: 2 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 40 * time.Millisecond, MinConnectTimeout: sc.attemptTimeout})
	if err != nil {
		t.Fatal(err)
	}
	opts := []producer.Option{
		producer.WithMaxAttempts(sc.maxAttempts),
		producer.WithAttemptTimeout(sc.attemptTimeout),
		producer.WithThrottleSchedule(throttle),
		producer.WithFailureSchedule(backoff.Constant(3 * time.Millisecond)),
		producer.WithMaxInFlight(sc.maxInFlight),
		producer.WithRand(xrand.New(sc.seed, 0x6a177e5)),
		producer.WithObserver(func(e producer.Event) {
			if e.Kind == producer.EventRetry && e.Why == producer.Throttled {
				for {
					old := maxThrottleWait.Load()
					if int64(e.Delay) <= old || maxThrottleWait.CompareAndSwap(old, int64(e.Delay)) {
						break
					}
				}
			}
			switch e.Kind {
			case producer.EventAttempt:
				attMu.Lock()
				attempts[e.MessageID] = append(attempts[e.MessageID], attemptRec{ep: e.Endpoint})
				attMu.Unlock()
			case producer.EventRetry:
				res := status.Code(e.Err).String()
				if e.Code != brokercode.Unspecified {
					res += fmt.Sprintf("(%d)", int32(e.Code))
				}
				attMu.Lock()
				if a := attempts[e.MessageID]; len(a) > 0 {
					a[len(a)-1].res = res
				}
				attMu.Unlock()
			}
		}),
	}
	if sc.failoverAlways {
		opts = append(opts, producer.WithFailoverOnUnknownOutcome())
	}
	var store *deadletter.Store
	if sc.fallback {
		opts = append(opts, producer.WithFallback(func(m *producer.Message, err error) {
			if i := msgIndex(m.ID); i >= 0 && i < n {
				backCalls[i].Add(1)
			}
		}))
	} else {
		if store, err = deadletter.Open(filepath.Join(t.TempDir(), "dead.db")); err != nil {
			t.Fatalf("deadletter.Open() = %v", err)
		}
		defer store.Close()
		opts = append(opts, producer.WithDeadLetterSink(store))
	}
	target, churn := strings.Join(addrs, ","), func(<-chan struct{}) {}
	if sc.scheme {
		var res []producer.Option
		target, res, churn = schemeTarget(sc, addrs)
		opts = append(opts, res...)
	}
	p, err := producer.New(target, append([]producer.Option{producer.WithProtocol(producer.RocketryV1)}, opts...)...)
	if err != nil {
		t.Fatalf("producer.New() = %v", err)
	}

	cctx, stopConsumers := context.WithCancel(context.Background())
	var consumers sync.WaitGroup
	for _, lb := range lbs {
		lb.consume(cctx, &consumers)
	}
	stopChaos := make(chan struct{})
	chaosDone := make(chan struct{})
	churnDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		chaos(sc, lbs, stopChaos, o)
	}()
	go func() {
		defer close(churnDone)
		churn(stopChaos)
	}()

	// Which messages go sync, async or TrySendAsync, and which are
	// transactional: drawn from the seed.
	plan := rand.New(rand.NewPCG(sc.seed, 0x5e4d))
	msgs := make([]*producer.Message, n)
	var syncIdx, asyncIdx []int
	try := make([]bool, n)
	for i := range n {
		msgs[i] = &producer.Message{ID: msgID(sc.seed, i), Topic: topic, Body: []byte(msgID(sc.seed, i)), Transactional: plan.Float64() < sc.txShare}
		if msgs[i].Transactional {
			o.transactional++
		}
		if plan.Float64() < sc.asyncShare {
			asyncIdx = append(asyncIdx, i)
			try[i] = plan.IntN(4) == 0
		} else {
			syncIdx = append(syncIdx, i)
		}
	}
	o.syncSent, o.asyncSent = len(syncIdx), len(asyncIdx)

	var (
		mu     sync.Mutex
		okIDs  = make([]bool, n)
		errIDs = make([]bool, n)
	)
	record := func(i int, r *producer.SendReceipt, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			o.ok++
			okIDs[i] = true
			return
		}
		o.failed++
		errIDs[i] = true
		var se *producer.SendError
		if !errors.As(err, &se) {
			o.unexpectedErrs = append(o.unexpectedErrs, fmt.Sprintf("message %d: %v (not a *SendError)", i, err))
			return
		}
		o.failKinds[failKind(se)]++
		if !se.DeadLettered {
			o.failedNotSpooled++
			o.unexpectedErrs = append(o.unexpectedErrs, fmt.Sprintf("message %d: not handed back: %v", i, err))
		}
	}

	var senders sync.WaitGroup
	var nextSync atomic.Int64
	for range sc.syncWorkers {
		senders.Go(func() {
			for {
				k := int(nextSync.Add(1)) - 1
				if k >= len(syncIdx) {
					return
				}
				i := syncIdx[k]
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				r, err := p.Send(ctx, msgs[i])
				cancel()
				record(i, r, err)
			}
		})
	}
	senders.Go(func() {
		for _, i := range asyncIdx {
			cb := func(r *producer.SendReceipt, err error) {
				callbacks[i].Add(1)
				record(i, r, err)
			}
			if try[i] {
				err := p.TrySendAsync(context.Background(), msgs[i], cb)
				if err == nil {
					mu.Lock()
					o.trySent++
					mu.Unlock()
					continue
				}
				if !errors.Is(err, producer.ErrBufferFull) {
					t.Errorf("TrySendAsync(%s) = %v; want nil or ErrBufferFull", msgs[i].ID, err)
				}
			}
			if err := p.SendAsync(context.Background(), msgs[i], cb); err != nil {
				t.Errorf("SendAsync(%s) = %v; want nil", msgs[i].ID, err)
				callbacks[i].Add(1) // refused: no callback is owed
			}
		}
	})
	senders.Wait()

	// Let the async sends in flight finish, on calm brokers.
	close(stopChaos)
	<-chaosDone
	<-churnDone
	for _, lb := range lbs {
		lb.b.SetFaults(broker.Faults{})
		lb.b.SetThrottle(broker.Throttle{})
		lb.pausedUntil.Store(0)
		if lb.px != nil {
			lb.px.held.Store(false)
		}
	}
	// Async sends have no deadline, and a broker's RetryInfo hint may make
	// one wait long after a throttle: Close gives them a few seconds, then
	// cancels them, and they must still be handed back, each callback
	// once.
	closeCtx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	if err := p.Close(closeCtx); err != nil {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close() = %v; want nil or the context's deadline", err)
		}
		o.closeCancelled = true
	}
	cancel()
	o.maxThrottleWait = time.Duration(maxThrottleWait.Load())
	stopConsumers()
	consumers.Wait()

	storedOn := o.countStored(lbs)

	back := handedBack(t, sc, backCalls, store)
	for _, c := range back {
		o.handedBack += c
		if c > 1 {
			o.handedBackDup++
		}
	}

	for i := range n {
		id := msgID(sc.seed, i)
		s, b := storedOn[id] > 0, back[id] > 0
		switch {
		case !s && !b:
			o.lost++
		case s && b:
			o.storedAndBack++
		}
		if storedOn[id] > 1 {
			o.crossBroker++
			// How it happened: the message's attempts, as "broker:answer"
			// (A, B: the live brokers, D: the one down).
			seq := attempts[id]
			parts := make([]string, len(seq))
			for k, x := range seq {
				letter := "D"
				for bi, lb := range lbs {
					if lb.addr == x.ep {
						letter = string(rune('A' + bi))
					}
				}
				res := x.res
				if res == "" {
					res = "end"
				}
				parts[k] = letter + ":" + res
			}
			o.crossCauses[strings.Join(parts, " ")]++
		}
		if okIDs[i] && !s {
			o.okNotStored++
		}
		if !okIDs[i] && !errIDs[i] {
			o.unexpectedErrs = append(o.unexpectedErrs, fmt.Sprintf("message %d: no answer", i))
		}
	}
	for _, i := range asyncIdx {
		if c := callbacks[i].Load(); c != 1 {
			o.badCallbacks++
		}
	}

	if sc.replay && !sc.fallback {
		replay(t, sc, lbs, store, storedOn, o)
	}
	o.elapsed = time.Since(start)
	return o
}
