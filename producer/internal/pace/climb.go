package pace

import (
	"math"
	"time"
)

// This file holds the rate's course between cuts: the cubic back to wmax
// and past it, the raises of slow start and of a rate past the cubic, and
// the end of an episode (pacer.go and cut.go have the cuts).

// cubic is the rate t after a cut to pacerBeta of wmax: back to wmax at
// pacerRecover, then up by pacerBeta's complement at pacerProbe past it.
func cubic(wmax float64, t, probe time.Duration) float64 {
	if t < pacerRecover {
		x := 1 - float64(t)/float64(pacerRecover)
		return wmax * (1 - (1-pacerBeta)*x*x*x)
	}
	x := float64(t-pacerRecover) / float64(probe)
	return wmax * (1 + (1-pacerBeta)*x*x*x)
}

// stepLocked moves the limiter along the cubic, then raises the rate by
// pacerGrow every pacerDouble in which an attempt waited; in slow start,
// by pacerSlowGrow every pacerSlowStep in which one waited. A rate that holds nobody back
// is not raised, and a pause (all senders waiting out their own schedules)
// is not made up for with a run of raises. The episode ends when nobody
// waited for pacerIdle past the cubic. Called with mu held.
func (p *Pacer) stepLocked(now time.Time) {
	if now.Sub(p.stepAt) < pacerStep {
		return
	}
	// The climb's clock runs while attempts wait for the rate: a pause in
	// which nobody sends (every sender waiting out its own schedule) is
	// not time at the rate, and the rate that meets them when they come
	// back is the one they left. (CUBIC does not grow a window that the
	// application does not fill either.) Without it, 4 senders all
	// refused came back after their second to a rate 30% over wmax, and
	// were all refused again: 22% of capacity.
	if now.UnixNano()-p.lastBind.Load() <= int64(pacerIdleGap) && now.Sub(p.cutAt) >= p.drain && !p.queueing(now, pacerStep) {
		p.climb += now.Sub(p.climbAt)
	}
	p.climbAt = now
	t := p.climb
	if t >= pacerRecover && !p.topSet {
		p.topSet, p.topAt, p.topN, p.topIdle = true, now, p.stores.Load(), p.idle.Load()
	}
	past := t >= pacerRecover+p.probe
	// (The end waits for a slowed probe's time: near the capacity a few
	// senders rarely wait for a turn, and an episode ended there let 4
	// senders drain the bucket and all be refused: 88% and 91% of
	// capacity in two of five 10 s runs.)
	if (past || p.slow || now.Sub(p.cutAt) > pacerRecover+p.probe) && now.UnixNano()-p.lastBind.Load() > int64(pacerIdle) && now.Sub(p.cutAt) > pacerIdle {
		p.endLocked() // nobody held back
		return
	}
	var r float64
	switch {
	case p.slow || past:
		step := pacerDouble
		if p.slow {
			step = pacerSlowStep
		}
		if now.Sub(p.stepAt) < step {
			return
		}
		p.stepAt = now
		if !p.binding.Swap(false) || now.Sub(p.cutAt) < p.drain || p.queueing(now, step) {
			return
		}
		r = pacerGrow * p.r
		if p.slow {
			r = pacerSlowGrow * p.r
		}
		if p.drain > 0 {
			// A broker that queues answers slower, not "no", while the
			// rate is over what it takes: past pacerCeil times what it
			// stored in the last second the senders, not the rate, set
			// the pace, and a rate grown further would let them all go
			// at once when the refused ones come back.
			if acc, k := p.recentRate(now, p.stores.Load(), time.Second); k > 0 {
				r = max(p.r, min(r, pacerCeil*acc))
			}
		}
	default:
		p.stepAt = now
		r = cubic(p.wmax, t, p.probe)
		if math.Abs(r-p.r) < 0.001*p.r {
			return
		}
	}
	p.r = r
	p.lim.setRate(r)
	if r >= pacerRetake*p.lim.dealt {
		// The turns handed out at the lower rate would hold their
		// attempts (up to a turn each for every sender) back at it:
		// they are void, and taken again at r.
		p.lim.redeal(now)
		close(p.changed)
		p.changed = make(chan struct{})
	}
}

// endLocked ends the episode, and lets the attempts waiting go. Called
// with mu held.
func (p *Pacer) endLocked() {
	p.on.Store(false)
	p.lim = nil
	p.ring.Store(0)
	close(p.changed)
	p.changed = nil
}
