package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/broker"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/internal/xrand"
	"github.com/rocketry-go/rocketry/producer"
	"github.com/rocketry-go/rocketry/producer/deadletter"
)

const (
	demoTopic      = "demo"
	steadyGroup    = "billing"
	backtrackGroup = "audit"
	// consumeTick is how often a consumer group asks for messages.
	consumeTick = 10 * time.Millisecond
)

// demoRun is one run of the demo: the broker, the consumers, the producer
// and what was counted.
type demoRun struct {
	c        *demoConfig
	b        *broker.Broker
	counters *sendCounters
	start    time.Time
	spool    string
	store    *deadletter.Store // at spool, open for the whole run

	// consumer side
	cc         *grpc.ClientConn
	consumer   rocketryv1.ConsumerServiceClient
	resetAudit chan struct{}
	recvErrs   atomic.Int64

	// broker-side throttle periods seen by polling Stats: how many times
	// each kind of throttling started, and whether it is on now.
	backlogPeriods, storagePeriods atomic.Int64
	backlogOn, storageOn           atomic.Bool

	// accepted[i] says message i was handed to the producer: its send
	// started (each index is written by one sender, read after they end).
	accepted []bool

	mu       sync.Mutex
	timeline []demoEvent
}

// demoEvent is a moment of the run worth reporting.
type demoEvent struct {
	At        time.Duration `json:"-"`
	AtSeconds float64       `json:"at_seconds"`
	What      string        `json:"what"`
}

func (r *demoRun) note(format string, args ...any) {
	at := time.Since(r.start)
	r.mu.Lock()
	r.timeline = append(r.timeline, demoEvent{At: at, AtSeconds: roundTo(at.Seconds(), 3), What: fmt.Sprintf(format, args...)})
	r.mu.Unlock()
}

// demo runs the demo described by c and returns its summary. stdout gets
// the configuration first (not with --json); stderr gets the live progress
// display when it is a terminal. The sends stop at stop's first signal or
// timeout; the messages never handed to the producer are counted apart,
// neither sent nor lost.
func demo(c *demoConfig, stop *stopper, stdout, stderr io.Writer) (*demoSummary, error) {
	r := &demoRun{c: c, counters: newSendCounters(c.messages), start: time.Now(), resetAudit: make(chan struct{}),
		accepted: make([]bool, c.messages)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	dir, err := os.MkdirTemp("", "rocketry-demo-")
	if err != nil {
		return nil, err
	}
	// The store goes with the in-process broker: its messages could not
	// be sent anywhere after the run.
	defer os.RemoveAll(dir)
	stop.onExit(func() { os.RemoveAll(dir) })
	r.spool = filepath.Join(dir, "dead-letter.db")
	if r.store, err = deadletter.Open(r.spool); err != nil {
		return nil, err
	}
	defer r.store.Close()

	r.b, err = broker.New(
		broker.WithQueues(c.queues),
		broker.WithThrottle(broker.Throttle{
			MaxBacklog:       c.maxBacklog,
			ColdReadDistance: c.coldReadDistance,
			MaxStorageLoad:   c.maxStorageLoad,
		}),
		broker.WithFaults(broker.Faults{InternalRate: c.internalRate}),
		broker.WithSeed(int64(c.seed)),
	)
	if err != nil {
		return nil, err
	}
	if err := r.b.Start("127.0.0.1:0"); err != nil {
		return nil, err
	}
	defer r.b.Stop()

	if !c.jsonOut {
		r.writeConfig(stdout)
	}

	r.cc, err = grpc.NewClient(r.b.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()), r.connectParams())
	if err != nil {
		return nil, err
	}
	defer r.cc.Close()
	r.consumer = rocketryv1.NewConsumerServiceClient(r.cc)

	p, err := r.newProducer(true)
	if err != nil {
		return nil, err
	}

	// The consumers and the watcher run until the sends and the replay are
	// done: the backlog must keep draining for throttling to lift.
	bg, stopBG := context.WithCancel(ctx)
	var bgWG sync.WaitGroup
	defer func() { stopBG(); bgWG.Wait() }()
	bgWG.Add(3)
	go func() { defer bgWG.Done(); r.consume(bg, steadyGroup, c.consumeRate, nil) }()
	go func() { defer bgWG.Done(); r.consume(bg, backtrackGroup, c.rereadRate, r.resetAudit) }()
	go func() { defer bgWG.Done(); r.direct(bg) }()

	disp := startProgress(stderr, c.quiet, "sending", int64(c.messages), r.counters.done.Load, r.demoStatus)
	stop.onExit(disp.finish)
	defer disp.finish()
	stop.onStop(func(why error) { disp.setNote(stderr, c.quiet, "rocketry demo", stoppingNote(why, c.grace, true)) })

	sendStart := time.Now()
	sendsDone := make(chan struct{})
	closed := stop.closeWhen(p, sendsDone, c.grace)
	r.send(stop.ctx, p)
	close(sendsDone)
	sendElapsed := time.Since(sendStart)
	closeErr := closed()
	disp.finish()

	sum := r.verify()
	if c.fifoGroups > 0 {
		f := r.checkFIFO()
		sum.FIFO = &f
	}
	sum.SendSeconds = sendElapsed.Seconds()
	if closeErr != nil && stop.why() == nil { // after a stop, the sends Close cancelled are counted
		sum.Problems = append(sum.Problems, "closing the producer: "+shortError(closeErr))
	}
	if why := stop.why(); why != nil {
		sum.Stopped = why.Error()
	}

	if c.replay && sum.DeadLettered > 0 && stop.why() == nil {
		r.replaySpool(ctx, sum)
	}
	if left, _ := r.store.Len(); left > 0 {
		sum.SpoolLeft = left
	}

	stopBG()
	bgWG.Wait()
	r.mu.Lock()
	sum.Timeline = append([]demoEvent(nil), r.timeline...)
	r.mu.Unlock()
	sum.ThrottlePeriods = map[string]int64{"BACKLOG": r.backlogPeriods.Load(), "STORAGE_LOAD": r.storagePeriods.Load()}
	sum.Elapsed = time.Since(r.start)
	sum.ElapsedSeconds = sum.Elapsed.Seconds()
	return sum, nil
}

// throttleSchedule is the scaled gRPC connection backoff.
func (r *demoRun) throttleSchedule() *backoff.Connection {
	s, err := backoff.NewConnection(r.c.throttleConfig())
	if err != nil {
		panic(err) // validated with the flags
	}
	return s
}

// connectParams scales gRPC's own reconnect backoff like the throttle
// schedule, so that the clients come back soon after the broker restarts.
func (r *demoRun) connectParams() grpc.DialOption {
	cfg := r.c.throttleConfig()
	return grpc.WithConnectParams(grpc.ConnectParams{
		Backoff: grpcbackoff.Config{
			BaseDelay:  cfg.BaseDelay,
			Multiplier: cfg.Multiplier,
			Jitter:     cfg.Jitter,
			MaxDelay:   cfg.MaxDelay,
		},
		MinConnectTimeout: cfg.MinConnectTimeout,
	})
}

// newProducer builds the demo's producer; withSpool adds the dead-letter
// store and the observer (the replay's producer has neither).
func (r *demoRun) newProducer(withSpool bool, extra ...producer.Option) (*producer.Producer, error) {
	c := r.c
	failure := backoff.Immediate
	if c.failure == "backoff" {
		failure = r.throttleSchedule()
	}
	opts := []producer.Option{
		producer.WithProtocol(c.wireProtocol()),
		producer.WithPacing(c.pacing),
		producer.WithMaxAttempts(c.maxAttempts),
		producer.WithAttemptTimeout(c.attemptLimit),
		producer.WithThrottleSchedule(r.throttleSchedule()),
		producer.WithFailureSchedule(failure),
		producer.WithMaxInFlight(c.maxInFlight),
		producer.WithRand(xrand.New(c.seed, c.seed^0x9e3779b97f4a7c15)),
		producer.WithDialOptions(r.connectParams()),
	}
	if withSpool {
		opts = append(opts, producer.WithDeadLetterSink(r.store), producer.WithObserver(r.counters.observe))
	}
	return producer.New(r.b.Addr(), append(opts, extra...)...)
}

// send sends every message: the first ones with SendAsync from one
// goroutine, the others with Send from c.syncWorkers goroutines, all at
// once, until stop ends. It returns when every send has ended. The sends
// themselves are not bound to stop: Close ends them (closeWhen).
func (r *demoRun) send(stop context.Context, p *producer.Producer) {
	c := r.c
	nAsync := c.asyncCount()
	body := make([]byte, c.bodyBytes)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	msg := func(i int) *producer.Message {
		return &producer.Message{ID: demoID(i), Topic: demoTopic, Body: body, MessageGroup: c.fifoGroup(i)}
	}
	// started says whether send i was handed to the producer: a send
	// refused without an attempt (the producer closed) was not.
	started := func(i int, err error) bool {
		var se *producer.SendError
		r.accepted[i] = err == nil || errors.As(err, &se)
		return r.accepted[i]
	}

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range nAsync {
			if stop.Err() != nil {
				return
			}
			start := time.Now()
			r.counters.inFlight.Add(1)
			wg.Add(1)
			err := p.SendAsync(context.Background(), msg(i), func(_ *producer.SendReceipt, err error) {
				r.counters.ended(start, err)
				wg.Done()
			})
			if err != nil {
				r.counters.inFlight.Add(-1)
				wg.Done()
				if !started(i, err) {
					return
				}
			} else {
				r.accepted[i] = true
			}
		}
	}()
	var next atomic.Int64
	next.Store(int64(nAsync))
	for range c.syncWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for stop.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= c.messages {
					return
				}
				start := time.Now()
				r.counters.inFlight.Add(1)
				_, err := p.Send(context.Background(), msg(i))
				if !started(i, err) {
					r.counters.inFlight.Add(-1)
					return
				}
				r.counters.ended(start, err)
			}
		}()
	}
	wg.Wait()
}

// demoID is the ID of message i; the demo sets IDs itself so that it can
// check the broker's log against what it sent.
func demoID(i int) string { return "demo-" + strconv.Itoa(i) }

// consume drains topic demo for group at rate messages per second, committing
// as it reads, until ctx ends. A receive on reset first moves the group back
// to offset 0 (a backtrack), so that it re-reads the whole log.
func (r *demoRun) consume(ctx context.Context, group string, rate float64, reset <-chan struct{}) {
	t := time.NewTicker(consumeTick)
	defer t.Stop()
	last := time.Now()
	budget := 0.0
	for {
		select {
		case <-ctx.Done():
			return
		case <-reset:
			reset = nil
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := r.consumer.ResetOffset(rctx, &rocketryv1.ResetOffsetRequest{Topic: demoTopic, Group: group, Offset: 0})
			cancel()
			if err != nil {
				r.note("group %q: reset to offset 0 failed: %s", group, shortError(err))
			} else {
				r.note("group %q reset to offset 0, re-reading at %s msg/s", group, fmtCount(int64(rate)))
			}
		case now := <-t.C:
			budget = min(budget+rate*now.Sub(last).Seconds(), rate*5*consumeTick.Seconds())
			last = now
			n := min(int(budget), broker.MaxReceiveMessages)
			if n < 1 {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			resp, err := r.consumer.ReceiveMessages(rctx, &rocketryv1.ReceiveMessagesRequest{
				Topic: demoTopic, Group: group, MaxMessages: int32(n), AutoCommit: true,
			})
			cancel()
			if err != nil {
				r.recvErrs.Add(1)
				continue
			}
			// Unused budget is kept (up to a few ticks' worth), so the
			// group catches up at its rate when messages come back.
			budget -= float64(len(resp.GetMessages()))
		}
	}
}

// direct triggers the scripted events (the backtrack, the restart) when
// their share of the messages is done, and follows the broker's throttling
// to count how often each kind starts.
func (r *demoRun) direct(ctx context.Context) {
	c := r.c
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	resetDone, restartDone := c.resetAt == 0, c.restartAt == 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		share := float64(r.counters.done.Load()) / float64(c.messages)
		if !resetDone && share >= c.resetAt {
			resetDone = true
			close(r.resetAudit)
		}
		if !restartDone && share >= c.restartAt {
			restartDone = true
			if err := r.b.Restart(); err != nil {
				r.note("broker restart failed: %s", shortError(err))
			} else {
				r.note("broker restarted: connections dropped, same address")
			}
		}
		r.followThrottling()
	}
}

// followThrottling polls the broker's stats and counts the starts of each
// kind of throttling.
func (r *demoRun) followThrottling() {
	st := r.b.Stats()
	backlog := false
	for _, tp := range st.GetTopics() {
		if tp.GetTopic() == demoTopic && tp.GetThrottledBacklog() {
			backlog = true
		}
	}
	if backlog && !r.backlogOn.Swap(true) {
		r.backlogPeriods.Add(1)
	} else if !backlog {
		r.backlogOn.Store(false)
	}
	storage := st.GetThrottledStorageLoad()
	if storage && !r.storageOn.Swap(true) {
		r.storagePeriods.Add(1)
	} else if !storage {
		r.storageOn.Store(false)
	}
}

// replaySpool sends the dead-lettered messages again with a producer of the
// same settings, without a spool, and records the outcome in sum.
func (r *demoRun) replaySpool(ctx context.Context, sum *demoSummary) {
	var unknown atomic.Int64 // the replay's retries after an unknown outcome, and its sends that ended on one
	rp, err := r.newProducer(false, producer.WithObserver(func(e producer.Event) {
		if (e.Kind == producer.EventRetry && e.Why == producer.FailedUnknown) || (e.Kind == producer.EventExhausted && endedUnknown(e.Err)) {
			unknown.Add(1)
		}
	}))
	if err != nil {
		sum.Problems = append(sum.Problems, "replay: "+shortError(err))
		return
	}
	defer rp.Close(context.Background())
	res, err := r.store.Replay(ctx, rp, deadletter.ReplayOptions{})
	sum.Replay = &demoReplay{Read: res.Stored + res.Failed + res.Corrupt, Stored: res.Stored, Failed: res.Failed + res.Corrupt + res.Left}
	if err != nil {
		sum.Problems = append(sum.Problems, "replay: "+shortError(err))
	}
	// The replay sends messages again (by the same IDs): count what was
	// stored twice, against the unknown outcomes of the run and the replay.
	sum.UnknownOutcomes += unknown.Load()
	sum.Copies = topicCopies(r.b.Stats(), demoTopic)
	after := r.storedCounts()
	sum.StoredAfterReplay = 0
	sum.DuplicatesStored = 0
	for i := range r.c.messages {
		switch n := after[demoID(i)]; {
		case n == 1:
			sum.StoredAfterReplay++
		case n > 1:
			sum.StoredAfterReplay++
			sum.DuplicatesStored++
		}
	}
}

// storedCounts counts the broker's stored messages of the demo's topic by ID.
func (r *demoRun) storedCounts() map[string]int {
	msgs := r.b.Messages(demoTopic)
	out := make(map[string]int, len(msgs))
	for _, m := range msgs {
		out[m.GetMessage().GetMessageId()]++
	}
	return out
}
