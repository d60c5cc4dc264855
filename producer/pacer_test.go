package producer

import (
	"context"

	"github.com/rocketry-go/rocketry/backoff"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// TestPacerEstimate: between two throttles the broker stored its capacity
// times the time between them; the rate is set just under that.
func TestPacerEstimate(t *testing.T) {
	var p pacer
	t0 := time.Unix(1000, 0)
	for i := range 50 { // 500/s for 100 ms before the first throttle
		p.stored(t0.Add(time.Duration(i) * 2 * time.Millisecond))
	}
	p.throttled(t0.Add(100 * time.Millisecond))
	require.True(t, p.on.Load(), "the first throttle opens an episode")
	assert.InDelta(t, 245, p.rateNow(), 1, "slow start at half the recent rate (49 stores after the first sample, over 100 ms)")
	assert.True(t, p.slowStart)

	// Throttles within 50 ms are the same overload: they count once.
	for range 30 {
		p.throttled(t0.Add(110 * time.Millisecond))
	}
	assert.InDelta(t, 245, p.rateNow(), 1)

	// 300 stores in the 200 ms to the next throttle: 1,500/s.
	for range 300 {
		p.stored(t0.Add(200 * time.Millisecond))
	}
	p.throttled(t0.Add(300 * time.Millisecond))
	assert.InDelta(t, pacerMargin*1500, p.rateNow(), 1)
	assert.False(t, p.slowStart)

	// Demand short of capacity reads low: the rate is cut by half at most,
	// and the cut wakes the waits: they are made again at the new rate.
	changed := p.changed
	p.stored(t0.Add(420 * time.Millisecond))
	p.throttled(t0.Add(450 * time.Millisecond))
	assert.InDelta(t, pacerMargin*1500/2, p.rateNow(), 1)
	select {
	case <-changed:
	default:
		t.Error("a cut of the rate wakes the attempts waiting for a turn")
	}
	for range 75 {
		p.stored(t0.Add(480 * time.Millisecond))
	}
	p.throttled(t0.Add(500 * time.Millisecond))
	assert.InDelta(t, pacerMargin*1500, p.rateNow(), 1)

	// Probing: +0.3% for every 100 ms in which an attempt waited.
	for i := 1; i <= 10; i++ {
		p.binding.Store(i%2 == 0)
		p.mu.Lock()
		p.stepLocked(t0.Add(500*time.Millisecond + time.Duration(i)*pacerProbe))
		p.mu.Unlock()
	}
	assert.InDelta(t, pacerMargin*1500*pow(pacerRaise, 5), p.rateNow(), 0.5)

	// The episode ends after pacerQuiet without a throttle.
	p.mu.Lock()
	p.stepLocked(t0.Add(500*time.Millisecond + pacerQuiet + time.Millisecond))
	p.mu.Unlock()
	assert.False(t, p.on.Load())
	assert.Zero(t, p.rateNow())
}

func pow(x float64, n int) float64 {
	r := 1.0
	for range n {
		r *= x
	}
	return r
}

// bucketStub stores at most rate per second with a burst, and refuses the
// rest with a bare 530 (no RetryInfo hint), as a RocketMQ 5 proxy does.
type bucketStub struct {
	rocketryv1.UnimplementedMessagingServiceServer
	lim             *rate.Limiter
	calls, refusals atomic.Int64
	mu              sync.Mutex
	seen            map[string]bool
	duplicateStored atomic.Int64
}

func (s *bucketStub) SendMessage(_ context.Context, req *rocketryv1.SendMessageRequest) (*rocketryv1.SendMessageResponse, error) {
	s.calls.Add(1)
	if !s.lim.Allow() {
		s.refusals.Add(1)
		return nil, brokerErr(codes.ResourceExhausted, rocketryv1.Code_CODE_TOO_MANY_REQUESTS, rocketryv1.ThrottleReason_THROTTLE_REASON_SEND_RATE, 0)
	}
	out := &rocketryv1.SendMessageResponse{}
	s.mu.Lock()
	for _, m := range req.GetMessages() {
		if s.seen[m.GetMessageId()] {
			s.duplicateStored.Add(1)
		}
		s.seen[m.GetMessageId()] = true
		out.Results = append(out.Results, &rocketryv1.SendResult{MessageId: m.GetMessageId()})
	}
	s.mu.Unlock()
	return out, nil
}

// TestPacingKeepsSendersApart: 32 senders against a 1,000/s bucket that
// sends no hint. Paced, nearly every attempt is stored (the senders queue
// in the client); without pacing, the senders refused together come back
// together. The schedule is the connection backoff scaled down 100 times
// (10 ms, x1.6, no jitter on the first retry, as the algorithm says); the
// test reports both and asserts the ratio of attempts, which does not
// depend on the machine's speed. `rocketry bench --hintless` measures the
// unscaled case, with the server in its own process.
func TestPacingKeepsSendersApart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 2 x 1.5 s")
	}
	run := func(pacing bool) (stored, attempts int64, failed int64) {
		s := &bucketStub{lim: rate.NewLimiter(1000, 100), seen: map[string]bool{}}
		addr := serve(t, func(g *grpc.Server) { rocketryv1.RegisterMessagingServiceServer(g, s) })
		p := newTestProducer(t, addr, WithPacing(pacing), WithMaxAttempts(5), WithThrottleSchedule(scaledConnection(t)))
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		var ok, bad atomic.Int64
		var wg sync.WaitGroup
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					_, err := p.Send(context.Background(), msg("t"))
					if err != nil {
						bad.Add(1)
					} else {
						ok.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		require.Zero(t, s.duplicateStored.Load())
		return ok.Load(), s.calls.Load(), bad.Load()
	}
	ps, pa, pf := run(true)
	us, ua, uf := run(false)
	t.Logf("paced:   %d stored, %.3f attempts per stored, %d failed", ps, float64(pa)/float64(ps), pf)
	t.Logf("unpaced: %d stored, %.3f attempts per stored, %d failed", us, float64(ua)/float64(max(us, 1)), uf)
	assert.Zero(t, pf)
	assert.LessOrEqual(t, float64(pa)/float64(ps), 1.1, "paced attempts per stored message")
	assert.Less(t, float64(pa)/float64(ps), float64(ua)/float64(max(us, 1)), "pacing makes fewer attempts per stored message")
	assert.Greater(t, uf, int64(0), "without pacing, some sends spend their 5 attempts (else the scenario shows nothing)")
}

// scaledConnection is the default connection backoff, 100 times faster.
func scaledConnection(t testing.TB) *backoff.Connection {
	t.Helper()
	c, err := backoff.NewConnection(backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 1200 * time.Millisecond, MinConnectTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	return c
}

// TestPacerHintEndsEpisode: a throttle with the broker's hint ends an
// episode: that broker says when to come back.
func TestPacerHintEndsEpisode(t *testing.T) {
	var p pacer
	now := time.Unix(1000, 0)
	p.hinted() // no episode: nothing happens
	p.throttled(now)
	require.True(t, p.on.Load())
	p.hinted()
	assert.False(t, p.on.Load())
	ok, late := p.wait(context.Background())
	assert.True(t, ok)
	assert.False(t, late)
}

// TestPacerSpellEndsEpisode: nothing stored between two throttles is a
// spell (everything refused), not a rate: the episode ends.
func TestPacerSpellEndsEpisode(t *testing.T) {
	var p pacer
	t0 := time.Unix(1000, 0)
	p.stored(t0)
	p.throttled(t0.Add(10 * time.Millisecond))
	require.True(t, p.on.Load())
	p.throttled(t0.Add(100 * time.Millisecond))
	assert.False(t, p.on.Load())
	assert.Zero(t, p.rateNow())
}

// TestPacerStallSlowStartsAgain: a pace learnt in a bad spell does not hold
// the sends back once the broker has room again: after pacerStall without
// a throttle, a rate that holds attempts back doubles every pacerSlowStep,
// and one that holds nobody back stays.
func TestPacerStallSlowStartsAgain(t *testing.T) {
	var p pacer
	t0 := time.Unix(1000, 0)
	p.stored(t0)
	p.throttled(t0.Add(100 * time.Millisecond))
	for range 20 { // 20 stores in 1 s: a spell's 20/s
		p.stored(t0.Add(500 * time.Millisecond))
	}
	last := t0.Add(1100 * time.Millisecond)
	p.throttled(last)
	r0 := p.rateNow()
	require.InDelta(t, pacerMargin*20, r0, 0.1)

	step := func(at time.Time, binding bool) {
		p.binding.Store(binding)
		p.mu.Lock()
		p.stepLocked(at)
		p.mu.Unlock()
	}
	// Before the stall: the slow probe.
	step(last.Add(pacerStall-pacerSlowStep), true)
	assert.InDelta(t, r0*pacerRaise, p.rateNow(), 0.01, "near the peak: +0.3%")
	// After it, nobody waiting: the rate stays.
	stall := last.Add(pacerStall + time.Millisecond)
	step(stall, false)
	assert.InDelta(t, r0*pacerRaise, p.rateNow(), 0.01)
	// Attempts waiting: doubling every pacerSlowStep, so that 20/s reaches
	// 2,000/s in well under a second.
	for i := 1; i <= 7; i++ {
		step(stall.Add(time.Duration(i)*pacerSlowStep), true)
	}
	assert.InDelta(t, r0*pacerRaise*128, p.rateNow(), 0.5)
	assert.True(t, p.on.Load(), "the episode goes on: the next throttle measures again")
}

// TestPacerWaitTakesNewTurns: turns handed out at a slow start's first rate
// (one a second) do not hold the attempts once the rate has grown: a raise
// wakes them, and they take new turns at the new rate. Before, the tenth
// of ten attempts queued at 1/s waited nine seconds whatever the rate
// became.
func TestPacerWaitTakesNewTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p pacer
		p.throttled(time.Now()) // nothing stored: an episode at 1/s
		require.InDelta(t, pacerMinRate, p.rateNow(), 0)
		start := time.Now()
		var wg sync.WaitGroup
		var waited [10]time.Duration
		for i := range waited {
			wg.Go(func() {
				ok, late := p.wait(t.Context())
				assert.True(t, ok)
				assert.False(t, late)
				waited[i] = time.Since(start)
			})
		}
		synctest.Wait() // all ten hold a turn: the first at once, the others up to 9 s out
		time.Sleep(10 * time.Millisecond)
		p.mu.Lock()
		p.setRate(time.Now(), 1000)
		p.mu.Unlock()
		wg.Wait()
		for _, w := range waited {
			assert.Less(t, w, 100*time.Millisecond, "every attempt goes within a few turns at 1,000/s")
		}
	})
}

// TestPacerEndLetsWaitsGo: the end of an episode (a hint here) lets the
// attempts waiting for a turn go at once.
func TestPacerEndLetsWaitsGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p pacer
		p.throttled(time.Now())
		start := time.Now()
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() {
				ok, _ := p.wait(t.Context())
				assert.True(t, ok)
				assert.Less(t, time.Since(start), 10*time.Millisecond)
			})
		}
		synctest.Wait()
		p.hinted()
		wg.Wait()
	})
}
