package pace

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// engage opens an episode on p at rate r per second, as a run of refusals
// after stores would (the stores read as rate r).
func engage(t *testing.T, p *Pacer, now time.Time, r float64) {
	t.Helper()
	n := int(r / 5) // 200 ms of stores at r
	for i := range n {
		p.stored(now.Add(time.Duration(i) * 200 * time.Millisecond / time.Duration(n)))
	}
	at := now.Add(200 * time.Millisecond)
	for range pacerRun {
		p.throttled(at, at)
	}
	require.True(t, p.on.Load(), "a run of %d refusals opens an episode", pacerRun)
}

// TestPacerCutsFromAcceptedRate: an episode opens at pacerFirst of the rate
// that was getting through (the scope's first second: its rate counts the
// broker's first burst), not from nothing, takes that as wmax, climbs back
// to it in pacerRecover along the cubic, then probes past it.
func TestPacerCutsFromAcceptedRate(t *testing.T) {
	var p Pacer
	t0 := time.Unix(1000, 0)
	engage(t, &p, t0, 1000)
	cut := t0.Add(200 * time.Millisecond)
	assert.InDelta(t, pacerFirst*1000, p.wmax, 30, "in the scope's first second, pacerFirst of the store rate of the last second, idle time left out")
	assert.InDelta(t, p.wmax, p.rateNow(), 1)
	assert.False(t, p.slow, "200 stores: a trusted estimate")
	assert.Equal(t, 250*time.Millisecond, p.probe, "the first second's wmax is a guess: a fast probe")

	step := func(at time.Time) {
		p.binding.Store(true)
		p.lastBind.Store(at.UnixNano())
		p.mu.Lock()
		p.stepLocked(at)
		p.mu.Unlock()
	}
	step(cut.Add(pacerRecover / 2))
	assert.InDelta(t, p.wmax*(1-(1-pacerBeta)/8), p.rateNow(), 1, "half way: 7/8 of the way back")
	step(cut.Add(pacerRecover))
	assert.InDelta(t, p.wmax, p.rateNow(), 1, "back at wmax")
	step(cut.Add(pacerRecover + pacerProbeFast/2))
	assert.InDelta(t, p.wmax*(1+(1-pacerBeta)/8), p.rateNow(), 1, "probing past it on the fast time scale: the first second's wmax is a guess")

	// A refusal past wmax cuts again from what got through since.
	w := p.wmax
	for i := range 100 {
		p.stored(cut.Add(pacerRecover + time.Duration(i)*time.Millisecond))
	}
	p.throttled(cut.Add(pacerRecover+pacerProbeFast/2), cut.Add(pacerRecover+pacerProbeFast/2))
	assert.True(t, p.on.Load())
	assert.LessOrEqual(t, p.rateNow(), pacerBeta*w*1.2)
	assert.Equal(t, pacerProbe, p.probe, "after the guess's first cut, the probe's time scale is the usual one")
}

// TestPacerCutsFromTheCapacityBetweenRefusals: a refusal after a clean run
// cuts from what the broker stored since the last cut (its bucket empty at
// both refusals: its capacity), not from the rate of the last moments,
// which the bucket's savings let through; and while that rate holds from
// cut to cut, the probe slows, so that refusals come seconds apart.
// Regression: the rate of the last 150 ms set wmax at the rate refused, 5%
// over a 2,000/s bucket, which refused every 0.3 s (4 senders: 90% of
// capacity).
func TestPacerCutsFromTheCapacityBetweenRefusals(t *testing.T) {
	var p Pacer
	t0 := time.Unix(1000, 0)
	engage(t, &p, t0, 3000) // wmax: pacerFirst of 3,000
	at := t0.Add(200 * time.Millisecond)
	// cycle: 1 s in which the broker stores capacity a second, the last
	// 100 ms of it at 1.2 times the capacity (the probe spends the
	// bucket's savings), then refuses.
	cycle := func(capacity float64) {
		p.mu.Lock()
		p.r = 1.2 * capacity // the probe went past the capacity
		p.mu.Unlock()
		slow := int(capacity - 0.12*capacity)
		for i := range slow {
			p.stored(at.Add(time.Duration(i) * 900 * time.Millisecond / time.Duration(slow)))
		}
		fast := int(0.12 * capacity)
		for i := range fast {
			p.stored(at.Add(900*time.Millisecond + time.Duration(i)*100*time.Millisecond/time.Duration(fast)))
		}
		at = at.Add(time.Second)
		p.throttled(at, at)
		require.True(t, p.on.Load())
	}
	cycle(2000)
	assert.InDelta(t, 2000, p.wmax, 40, "the capacity, not the rate refused (2,400)")
	assert.Equal(t, pacerProbe, p.probe, "the rate that got through moved: a fast probe")
	for _, want := range []time.Duration{2 * pacerProbe, 4 * pacerProbe, pacerProbeMax, pacerProbeMax} {
		cycle(2000)
		assert.InDelta(t, 2000, p.wmax, 40)
		assert.Equal(t, want, p.probe, "the capacity holds: a slower probe")
	}
	cycle(1500)
	assert.InDelta(t, 1500, p.wmax, 30)
	assert.Equal(t, pacerProbe, p.probe, "the capacity fell: a fast probe again")
	assert.InDelta(t, 2*pacerBeta*1500, 2*p.rateNow(), 2, "cut to pacerBeta of it")
}

// TestPacerCutSoonAfterACutKeepsTheRate: refusals that go on right after a
// cut, with a store or two since, cut again from what the broker stored
// over the last second, not from the rate of that one store. Regression:
// one store in the 67 ms after a cut read as 15 a second, and a broker
// that stored 1,000 a second between its BACKLOG spells was paced at 14 a
// second for the rest of the run (the interop comparison's 5,000 sends
// took 124 s instead of 8 s).
func TestPacerCutSoonAfterACutKeepsTheRate(t *testing.T) {
	var p Pacer
	t0 := time.Unix(1000, 0)
	engage(t, &p, t0, 1000)
	cut := p.cutAt
	w := p.wmax
	p.stored(cut.Add(60 * time.Millisecond))
	at := cut.Add(67 * time.Millisecond)
	for range 2 * pacerEngageOf {
		p.throttled(at.Add(-time.Millisecond), at)
	}
	require.True(t, p.on.Load())
	assert.Greater(t, p.cutAt, cut, "the refusals cut again")
	assert.GreaterOrEqual(t, p.wmax, 0.5*w, "the new cut is from the last second's store rate, not from one store")
	assert.LessOrEqual(t, p.wmax, w, "and never above the rate cut before")
}

// TestPacerHoldsWhileTheQueueDrains: refusals that came 200 ms after their
// attempts left were queued by the broker first (RocketMQ's send queue,
// [TIMEOUT_CLEAN_QUEUE]). After the cut, its queue still refuses what was
// sent into it for a while: those refusals neither end the episode (as a
// message's own lone refusals do) nor cut again, and the rate stays at the
// cut until the queue has drained. Regression: against a broker process
// with a send queue, the episode ended at every cut, and 16-27 of 2,000
// sends spent their attempts (TestFlowControlBench).
func TestPacerHoldsWhileTheQueueDrains(t *testing.T) {
	var p Pacer
	t0 := time.Unix(1000, 0)
	for i := range 100 {
		p.stored(t0.Add(time.Duration(i) * 10 * time.Millisecond))
	}
	at := t0.Add(time.Second)
	for range pacerRun {
		p.throttled(at.Add(-200*time.Millisecond), at)
	}
	require.True(t, p.on.Load(), "sustained refusals engage")
	cut, r := p.cutAt, p.rateNow()
	for i := range 3 {
		left := cut.Add(time.Duration(50+100*i) * time.Millisecond)
		p.throttled(left, left.Add(200*time.Millisecond))
	}
	assert.True(t, p.on.Load(), "lone refusals from the draining queue do not end the episode")
	assert.Equal(t, cut, p.cutAt, "nor cut again")
	p.binding.Store(true)
	p.lastBind.Store(cut.Add(400 * time.Millisecond).UnixNano())
	p.mu.Lock()
	p.stepLocked(cut.Add(400 * time.Millisecond))
	p.mu.Unlock()
	assert.InDelta(t, r, p.rateNow(), 0.001, "the rate stays at the cut while the queue drains")
}

// TestPacerIgnoresOwnRefusals: one message in ten refused, once, for its
// own reasons, never opens an episode.
func TestPacerIgnoresOwnRefusals(t *testing.T) {
	var p Pacer
	now := time.Unix(1000, 0)
	for i := range 10_000 {
		now = now.Add(100 * time.Microsecond)
		if i%10 == 3 {
			p.throttled(now, now)
		} else {
			p.stored(now)
		}
		require.False(t, p.on.Load(), "attempt %d", i)
	}
}

// TestPacerSpellNoEpisode: a broker that refuses everything stores
// nothing: no rate gets through, so no episode opens; and one that stops
// storing in an episode ends it.
func TestPacerSpellNoEpisode(t *testing.T) {
	var p Pacer
	now := time.Unix(1000, 0)
	for range 100 {
		p.throttled(now, now)
	}
	assert.False(t, p.on.Load())

	var q Pacer
	engage(t, &q, now, 500)
	at := now.Add(time.Second)
	q.throttled(at, at)
	assert.False(t, q.on.Load(), "nothing stored since the cut")
	assert.Zero(t, q.rateNow())
}

// TestPacerScope: a topic refused always ("hot") does not pace another
// ("cold") on the same endpoint; a refusal that names the broker's state
// ([TIMEOUT_CLEAN_QUEUE], STORAGE_LOAD: ThrottledWide, as the producer's
// TestPaceResult reads them) paces every topic.
func TestPacerScope(t *testing.T) {
	var ps Pacers
	now := time.Unix(1000, 0)
	hot, cold := ps.Of("hot"), ps.Of("cold")
	for i := range 200 {
		at := now.Add(time.Duration(i) * time.Millisecond)
		cold.Record(Stored, at, at)
		hot.Record(Stored, at, at)
	}
	at := now.Add(200 * time.Millisecond)
	for range 20 {
		hot.Record(Throttled, at, at)
	}
	assert.True(t, hot.Topic.on.Load(), "hot is paced")
	assert.False(t, cold.Topic.on.Load(), "cold is not")
	assert.False(t, cold.Endpoint.on.Load(), "nor the endpoint")

	for range 20 {
		cold.Record(ThrottledWide, at, at)
	}
	assert.True(t, cold.Endpoint.on.Load(), "the send queue is the broker's: the endpoint is paced")
	assert.False(t, cold.Topic.on.Load())
}

// TestPacerHintEndsEpisode: a throttle with the broker's hint ends an
// episode: that broker says when to come back.
func TestPacerHintEndsEpisode(t *testing.T) {
	var p Pacer
	now := time.Unix(1000, 0)
	p.hinted() // no episode: nothing happens
	engage(t, &p, now, 100)
	p.hinted()
	assert.False(t, p.on.Load())
	ok, late := p.wait(context.Background())
	assert.True(t, ok)
	assert.False(t, late)
}

// TestPacerCutVoidsTurns: turns handed out before a cut do not hold the
// attempts at the old schedule: a cut wakes them and they take new turns.
func TestPacerCutVoidsTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p Pacer
		engage(t, &p, time.Now().Add(-time.Second), 100)
		p.mu.Lock()
		p.lim = newTurns(time.Now().Add(-time.Second), 1) // one a second
		p.r = 1
		p.mu.Unlock()
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
		synctest.Wait() // all ten hold a turn, up to 9 s out
		time.Sleep(10 * time.Millisecond)
		p.mu.Lock()
		p.cutLocked(time.Now(), 1000/pacerBeta, p.stores.Load(), 0)
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
		var p Pacer
		engage(t, &p, time.Now().Add(-time.Second), 100)
		p.mu.Lock()
		p.lim = newTurns(time.Now().Add(-time.Second), 1)
		p.mu.Unlock()
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

// TestPacerHoldsWhileStoresQueue: while stored attempts take pacerQueued
// longer than the episode's quickest store (they waited in the broker's
// queue), the rate is never raised (it is cut while it is over what the
// broker stores); once they are quick again, it grows.
// Before, a rate grown on its convex side until the first refusal reached
// twice a 100/s send queue's capacity.
func TestPacerHoldsWhileStoresQueue(t *testing.T) {
	var p Pacer
	t0 := time.Unix(1000, 0)
	engage(t, &p, t0, 1000)
	at := t0.Add(200 * time.Millisecond)
	step := func(at time.Time) float64 {
		p.binding.Store(true)
		p.lastBind.Store(at.UnixNano())
		p.mu.Lock()
		defer p.mu.Unlock()
		p.stepLocked(at)
		return p.r
	}
	p.flew(at, at.Add(time.Millisecond)) // the quickest store: 1 ms
	var r0 float64
	for i := 1; i <= 100; i++ {
		now := at.Add(time.Duration(i) * 10 * time.Millisecond)
		p.flew(now.Add(-pacerQueued-10*time.Millisecond), now) // queued
		if r := step(now); i == 1 {
			r0 = r
		}
	}
	at = at.Add(time.Second)
	assert.LessOrEqual(t, p.rateNow(), r0, "never raised while stores queue")
	for i := 1; i <= 300; i++ {
		now := at.Add(time.Duration(i) * 10 * time.Millisecond)
		p.flew(now.Add(-time.Millisecond), now) // quick again
		step(now)
	}
	assert.Greater(t, p.rateNow(), 1.1*r0, "grows once they are quick")
}

// TestPacerRefusalWhileRecoveringWithManyWaiting: with many attempts
// waiting their turn, a refusal while the rate still climbs back to wmax
// (under what got through) does not cut again; with few waiting, it does.
// Regression: against a bucket of 10 (5 ms of its rate), which refuses
// the requests that reach it together at any rate near its capacity,
// cutting at each one kept the rate in its dips (87-89% of capacity).
func TestPacerRefusalWhileRecoveringWithManyWaiting(t *testing.T) {
	for _, c := range []struct {
		waiting int32
		cuts    bool
	}{{pacerMany, false}, {1, true}} {
		var p Pacer
		t0 := time.Unix(1000, 0)
		engage(t, &p, t0, 2000)
		cut := p.cutAt
		// A clean run after the cut, while the rate is still recovering
		// (no step has advanced the climb).
		for i := range 2 * pacerClean {
			p.stored(cut.Add(60*time.Millisecond + time.Duration(i)*100*time.Microsecond))
		}
		p.waiting.Store(c.waiting)
		at := cut.Add(90 * time.Millisecond)
		p.throttled(at, at)
		require.True(t, p.on.Load())
		assert.Equal(t, c.cuts, p.cutAt.Equal(at), "waiting %d: cut again", c.waiting)
	}
}

// TestPacerLetsALoneRefusalPass: with many attempts waiting their turn, a
// refusal after pacerQuiet attempts without one does not cut, nor do the
// refusals of the same stall (attempts in flight when it was answered, or
// started just after); a second refusal within pacerQuiet attempts does.
// With a few senders, each refusal a quarter of them asleep for a second,
// the first cuts. Regression: a bucket of 10 behind a server that stalls
// now and then refuses a few requests at any rate near its capacity, and
// cutting at each kept the rate at 85-90% of it.
func TestPacerLetsALoneRefusalPass(t *testing.T) {
	for _, c := range []struct {
		peak int32
		cuts bool
	}{{pacerMany, false}, {4, true}} {
		var p Pacer
		t0 := time.Unix(1000, 0)
		engage(t, &p, t0, 2000)
		cut := p.cutAt
		p.peakWait.Store(c.peak)
		p.waiting.Store(c.peak) // they stay: the peak holds
		p.mu.Lock()
		p.climb = pacerRecover // back at wmax
		p.mu.Unlock()
		at := cut.Add(60 * time.Millisecond)
		store := func(n int) {
			for range n {
				p.stored(at)
				at = at.Add(500 * time.Microsecond)
			}
		}
		store(2 * pacerQuiet)
		p.throttled(at.Add(-time.Millisecond), at)
		require.True(t, p.on.Load())
		if c.cuts {
			assert.Equal(t, at, p.cutAt, "few senders: the refusal cuts")
			continue
		}
		assert.Equal(t, cut, p.cutAt, "a lone refusal does not cut")
		stall := at
		p.throttled(stall.Add(-2*time.Millisecond), stall.Add(time.Millisecond))
		p.throttled(stall.Add(pacerStep/2), stall.Add(pacerStep))
		assert.Equal(t, cut, p.cutAt, "nor do the same stall's")
		store(pacerQuiet / 4)
		p.throttled(at.Add(-time.Millisecond), at)
		assert.Equal(t, at, p.cutAt, "a second refusal within pacerQuiet attempts cuts")
		store(pacerQuiet + 1)
		p.throttled(at.Add(-time.Millisecond), at)
		assert.NotEqual(t, at, p.cutAt, "after pacerQuiet attempts, a refusal is lone again")
	}
}
