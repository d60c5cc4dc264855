package pace

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// This file tests the cuts of cut.go's guessed, slowOver and flat: after
// a cut that guesses the probe is fast, slow start's cut over the capacity
// is cut again, and a plateau refused twice in a row is cut from under it.

// TestPacerProbesFastAfterSlowStart: slow start's end is a guess (the rate
// before its last raise): with many attempts waiting, the probe's time
// scale is pacerProbeFast until the next cut, which measures and sets it
// as usual. With a few (the senders who were not refused in the first
// instant: a refusal puts one of them to sleep for its second), it is the
// usual one.
func TestPacerProbesFastAfterSlowStart(t *testing.T) {
	for _, waiting := range []int32{2, 64} {
		probesFastAfterSlowStart(t, waiting)
	}
}

func probesFastAfterSlowStart(t *testing.T, waiting int32) {
	var p Pacer
	t0 := time.Unix(1000, 0)
	engage(t, &p, t0, 100) // 20 stores: too few to trust
	require.True(t, p.slow, "slow start")
	assert.Equal(t, pacerProbe, p.probe)
	at := p.cutAt
	p.mu.Lock()
	p.r = 3000 // slow start's raises
	p.peakWait.Store(waiting)
	p.mu.Unlock()
	for range 100 {
		at = at.Add(time.Millisecond)
		p.stored(at)
	}
	p.throttled(at, at)
	require.True(t, p.on.Load())
	require.Equal(t, at, p.cutAt, "slow start's refusal cuts")
	assert.False(t, p.slow)
	assert.InDelta(t, 2000, p.wmax, 1, "the rate before the last raise")
	want := time.Second
	if waiting >= pacerMany {
		want = 250 * time.Millisecond // the capacity is anywhere up to 3,000/s
	}
	assert.Equal(t, want, p.probe, "%d waiting", waiting)
	assert.True(t, p.guess, "wmax is a guess")
	assert.True(t, p.slowEnd)

	p.mu.Lock()
	p.cutLocked(at.Add(time.Second), 2000, p.stores.Load(), 0) // any cut after it
	p.mu.Unlock()
	assert.Equal(t, pacerProbe, p.probe, "the fast probe is for the guess's own cut")
	assert.False(t, p.guess)
	assert.False(t, p.slowEnd)
}

// TestPacerCutsAgainWhenSlowStartsCutIsOver: after slow start's cut, an
// attempt that left after it and was refused at once says the cut is over
// the capacity: it cuts again, from what the broker stored since, once.
// Attempts in flight at the cut, refused too, do not.
func TestPacerCutsAgainWhenSlowStartsCutIsOver(t *testing.T) {
	var p Pacer
	t0 := time.Unix(1000, 0)
	engage(t, &p, t0, 100)
	require.True(t, p.slow)
	at := p.cutAt
	p.mu.Lock()
	p.r = 5400
	p.peakWait.Store(64)
	p.mu.Unlock()
	for range 50 {
		at = at.Add(time.Millisecond)
		p.stored(at)
	}
	p.throttled(at, at)
	require.Equal(t, at, p.cutAt)
	require.InDelta(t, 3600, p.wmax, 1, "cut from the rate before the last raise: 1.8 times a capacity of 2,000/s")
	cut := at
	p.peakWait.Store(64) // 256 senders, most asleep: those left wait

	for range 40 { // 20 ms at 2,000 a second: the broker, empty, at its capacity
		at = at.Add(time.Second / 2000)
		p.stored(at)
	}
	p.throttled(cut.Add(-time.Millisecond), at) // in flight at the cut
	require.Equal(t, cut, p.cutAt, "an attempt in flight at the cut is the same overload")
	p.throttled(cut.Add(pacerStep/2), at) // left with the cut's turns
	require.Equal(t, cut, p.cutAt, "an attempt that left within pacerStep of the cut is the same overload")
	p.throttled(cut.Add(10*time.Millisecond), at) // left after the cut, refused at once
	require.True(t, p.on.Load())
	require.Equal(t, at, p.cutAt, "the cut was over the capacity: it cuts again")
	assert.InDelta(t, 2000, p.wmax, 1, "from what the broker stored since")
	assert.Equal(t, 250*time.Millisecond, p.probe)

	again := at
	for range 20 {
		at = at.Add(time.Second / 1400)
		p.stored(at)
	}
	p.throttled(again.Add(6*time.Millisecond), at)
	assert.Equal(t, again, p.cutAt, "once per slow start")
}

// TestPacerSlowStartsCutHeldWhenTheBrokerStoresTheRate: after slow start's
// cut, a refusal of an attempt that left after it does not cut again when
// the broker stored what it was sent (the rate is under its capacity: a
// refusal of its own), nor when the cut's refusal came late (a broker that
// queues: its refusals until the queue drains are the same overload).
func TestPacerSlowStartsCutHeldWhenTheBrokerStoresTheRate(t *testing.T) {
	for _, c := range []struct {
		name   string
		flight time.Duration // of the refusal that ends slow start
		rate   float64       // stored since the cut, a second
	}{{"the broker stores the rate", 0, 1400}, {"a queued refusal", 200 * time.Millisecond, 1000}} {
		var p Pacer
		t0 := time.Unix(1000, 0)
		engage(t, &p, t0, 100)
		at := p.cutAt
		p.mu.Lock()
		p.r = 3000
		p.mu.Unlock()
		for range 50 {
			at = at.Add(6 * time.Millisecond)
			p.stored(at)
		}
		p.throttled(at.Add(-c.flight), at)
		require.InDelta(t, 2000, p.wmax, 1)
		cut := at
		for range 28 { // 20 ms
			at = at.Add(time.Duration(float64(time.Second) / c.rate))
			p.stored(at)
		}
		p.throttled(cut.Add(10*time.Millisecond), at)
		assert.Equal(t, cut, p.cutAt, c.name)
	}
}

// TestPacerFlagsOfACutDoNotOutliveIt: a new episode, or a cut from the
// broker's queue, starts without the last cut's plateau refusal (flat) and
// with the usual probe.
func TestPacerFlagsOfACutDoNotOutliveIt(t *testing.T) {
	var p Pacer
	t0 := time.Unix(1000, 0)
	engage(t, &p, t0, 2000)
	p.mu.Lock()
	p.flat = true
	p.endLocked()
	p.mu.Unlock()
	engage(t, &p, t0.Add(2*time.Second), 2000)
	assert.False(t, p.flat, "a new episode")

	at := p.cutAt.Add(time.Second)
	for range 100 { // 1,000 a second
		at = at.Add(time.Millisecond)
		p.stored(at)
	}
	p.mu.Lock()
	p.flat, p.probe = true, pacerProbeFast
	p.r = 4000 // over what the broker stores
	p.queuedLocked(at, 100*time.Millisecond)
	p.mu.Unlock()
	require.Equal(t, at, p.cutAt, "a store that waited in the queue cuts")
	assert.False(t, p.flat, "a cut from the queue")
	assert.Equal(t, pacerProbe, p.probe, "a cut from the queue measures")
}

// TestPacerCutsUnderAPlateauRefusedTwice: a refusal on wmax's plateau soon
// after a cut is cut from the last second's store rate up to wmax, which
// counts a bucket's savings; when the plateau before was refused too, with
// a few senders, wmax is over the capacity, and the cut is from
// pacerFlatCut of it. Not when the refusal is over a second after the cut,
// nor with many senders waiting (a refusal costs one of them its second,
// and the search by halves finds the capacity).
func TestPacerCutsUnderAPlateauRefusedTwice(t *testing.T) {
	for _, c := range []struct {
		after   time.Duration
		waiting int32
		want    float64
	}{{250 * time.Millisecond, 4, 0.97 * 2080}, {1200 * time.Millisecond, 4, 2080}, {250 * time.Millisecond, 64, 2080}} {
		var p Pacer
		t0 := time.Unix(1000, 0)
		engage(t, &p, t0, 2000)
		p.waiting.Store(c.waiting)
		at := p.cutAt
		// plateau puts the rate back on a plateau of 2,080/s, stores at
		// 2,100 a second (the bucket's savings among them) for d, and
		// refuses an attempt at once.
		plateau := func(d time.Duration) {
			p.mu.Lock()
			p.wmax, p.r, p.climb = 2080, 2080, pacerRecover
			p.peakWait.Store(c.waiting)
			p.mu.Unlock()
			for end := at.Add(d); at.Before(end); {
				at = at.Add(time.Second / 2100)
				p.stored(at)
			}
			p.mu.Lock()
			p.quietA, p.quietAt = p.attempts.Load(), t0 // not a lone refusal
			p.mu.Unlock()
			p.throttled(at.Add(-time.Millisecond), at)
			require.True(t, p.on.Load())
			require.Equal(t, at, p.cutAt, "the refusal cuts")
		}
		plateau(250 * time.Millisecond)
		require.InDelta(t, 2080, p.wmax, 1, "the first: the last second's floor, up to wmax")
		plateau(c.after)
		assert.InDelta(t, c.want, p.wmax, 1, "the second, %v after the cut, %d waiting", c.after, c.waiting)
	}
}

// TestPacerAfterAnIdleGapKeepsAMeasuredWmax: a refusal far past wmax
// after a gap in which nobody sent (the broker's bucket filled, and what
// got through since counts its savings) cuts from wmax when wmax was
// measured, and from halfway between the rate refused and its cut when
// wmax was a guess (the first second's: the capacity may be far over it).
func TestPacerAfterAnIdleGapKeepsAMeasuredWmax(t *testing.T) {
	for _, c := range []struct {
		measured bool
		want     float64
	}{{true, 2000}, {false, (1 + pacerBeta) / 2 * 2600}} {
		var p Pacer
		t0 := time.Unix(1000, 0)
		engage(t, &p, t0, 2000)
		require.True(t, p.guess, "the first second's wmax is a guess")
		at := p.cutAt
		if c.measured {
			p.mu.Lock()
			p.cutLocked(at, 2000, p.stores.Load(), 0)
			p.mu.Unlock()
			require.False(t, p.guess)
		}
		p.stored(at.Add(time.Millisecond))
		at = at.Add(500 * time.Millisecond) // every sender asleep
		for end := at.Add(200 * time.Millisecond); at.Before(end); {
			at = at.Add(time.Second / 2600)
			p.stored(at)
		}
		p.mu.Lock()
		p.r = 2600 // the probe, past a full bucket
		p.mu.Unlock()
		p.throttled(at.Add(-time.Millisecond), at)
		require.True(t, p.on.Load())
		require.Equal(t, at, p.cutAt, "the refusal cuts")
		assert.InDelta(t, c.want, p.wmax, 1, "measured %v", c.measured)
	}
}
