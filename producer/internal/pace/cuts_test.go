package pace

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// This file tests the rate a refusal cuts from, past the first cuts that
// pacer_test.go tests: the probe's, the plateau's soon after a cut, and
// the search by halves.

// TestPacerProbeRefusalCutsFromWmax: a refusal of the probe, past the
// plateau, cuts from wmax at least, which got through, even when less got
// through since the cut (the dip, a plateau under the capacity: a small
// bucket spills what it cannot save); a refusal on the plateau cuts from
// what got through. Regression: cut after cut from the average since the
// cut walked a bucket of 10's rate down from 2,040/s to 1,600/s.
func TestPacerProbeRefusalCutsFromWmax(t *testing.T) {
	for _, c := range []struct {
		r, want float64
	}{{1.05 * 2000, 2000}, {2000, 1800}} {
		var p Pacer
		t0 := time.Unix(1000, 0)
		engage(t, &p, t0, 2000)
		p.mu.Lock()
		p.wmax, p.r = 2000, c.r
		cut := p.cutAt
		p.mu.Unlock()
		at := cut
		for range 1800 { // 1,800 a second since the cut
			at = at.Add(time.Second / 1800)
			p.stored(at)
		}
		p.throttled(at, at)
		require.True(t, p.on.Load())
		require.Equal(t, at, p.cutAt)
		assert.InDelta(t, c.want, p.wmax, 20, "refused at %.0f/s", c.r)
	}
}

// TestPacerRefusalSoonAfterACutHasAFloor: a refusal at wmax soon after a
// cut (not the probe's) cuts from what was stored over the last second,
// up to wmax, when the average since the cut, the dip alone, is lower.
func TestPacerRefusalSoonAfterACutHasAFloor(t *testing.T) {
	var p Pacer
	t0 := time.Unix(1000, 0)
	engage(t, &p, t0, 2000)
	at := p.cutAt
	for range 1400 { // 700 ms at 2,000 a second
		at = at.Add(time.Second / 2000)
		p.stored(at)
	}
	p.mu.Lock()
	p.cutLocked(at, 2000, p.stores.Load(), 0)
	cut := at
	p.mu.Unlock()
	for range 420 { // 300 ms at 1,400 a second: the dip
		at = at.Add(time.Second / 1400)
		p.stored(at)
	}
	require.Equal(t, 2000.0, p.wmax)
	p.throttled(at, at) // at p.r, under wmax
	require.True(t, p.on.Load())
	require.NotEqual(t, cut, p.cutAt, "a refusal after a clean run cuts")
	assert.InDelta(t, 1820, p.wmax, 40, "the last second's 1,820/s, not the dip's 1,400/s")
}

// TestPacerSearchesTheCapacityByHalves: with many attempts waiting, a probe
// refused far past wmax sets the next wmax halfway between the plateau
// that held and the rate refused; a refusal on that plateau halves again,
// down towards the one that held, and once within pacerHalveEnd of it,
// cuts from it. With a few senders, the probe's refusal cuts from wmax.
// Regression: against a bucket of 10, wmax left by slow start at
// 1,614-1,840/s rose a fifth of the way at each probe, and the rate sat
// under 1,950/s for 10 s.
func TestPacerSearchesTheCapacityByHalves(t *testing.T) {
	for _, c := range []struct {
		waiting int32
		want    float64
	}{{64, 1850}, {4, 1700}} {
		var p Pacer
		t0 := time.Unix(1000, 0)
		engage(t, &p, t0, 2000)
		p.waiting.Store(c.waiting) // they stay: the peak holds from cut to cut
		at := p.cutAt
		// plateau sets the rate at r on a plateau of wmax, back from the
		// cut, and stores at got a second for 500 ms.
		plateau := func(wmax, r, got float64) {
			p.mu.Lock()
			p.wmax, p.r, p.climb = wmax, r, pacerRecover
			p.peakWait.Store(c.waiting)
			p.mu.Unlock()
			for range int(got / 2) {
				at = at.Add(time.Duration(float64(time.Second) / got))
				p.stored(at)
			}
		}
		// refuse refuses an attempt at once, not a lone refusal.
		refuse := func() {
			p.mu.Lock()
			p.quietA, p.quietAt = p.attempts.Load(), t0
			p.mu.Unlock()
			p.throttled(at.Add(-time.Millisecond), at)
			require.True(t, p.on.Load())
			require.Equal(t, at, p.cutAt, "the refusal cuts")
		}
		plateau(1700, 2000, 1700)
		refuse()
		assert.InDelta(t, c.want, p.wmax, 5, "%d waiting: a probe refused at 2,000/s past a wmax of 1,700/s", c.waiting)
		if c.waiting < pacerMany {
			assert.Zero(t, p.held, "no search with a few senders")
			continue
		}
		assert.Equal(t, 1700.0, p.held, "the plateau that held")
		plateau(1850, 1850, 1600) // refused on the plateau: over the capacity
		refuse()
		assert.InDelta(t, 1775, p.wmax, 5, "halfway down to the plateau that held")
		assert.Equal(t, 1700.0, p.held)
		plateau(1710, 1710, 1600)
		refuse()
		assert.InDelta(t, 1700, p.wmax, 5, "within pacerHalveEnd: the plateau that held")
		assert.Zero(t, p.held, "the search ends")
	}
}
