package pace

import "time"

// This file holds which refusals are let pass as lone (lone), and what a
// cut does (cutLocked); pacer.go decides when a refusal cuts, and from
// what rate.

// lone reports whether a refusal is not the rate's: the first in
// pacerQuiet attempts, or one of the same stall as that one (an attempt
// that started before it was answered, or within pacerStep after); and
// counts it. Called with mu held.
func (p *Pacer) lone(start, now time.Time) bool {
	if start.Before(p.quietAt.Add(pacerStep)) && p.quietN < pacerMany {
		// The same stall's: the requests it held reach the broker
		// together, and a few are refused together, then one or two
		// more while its bucket, emptied, fills again.
		p.quietN++
		return true
	}
	a := p.attempts.Load()
	if p.quietA != 0 && a-p.quietA < pacerQuiet {
		return false
	}
	p.quietA, p.quietAt, p.quietN = a, now, 1
	// The peak counts again from now: senders who left are not many.
	p.peakWait.Store(p.waiting.Load())
	return true
}

// cutLocked cuts the rate to pacerBeta of w, the rate that was getting
// through, and voids the turns handed out: turns handed out at the rate
// that was just refused would all go to a broker that has just refused.
// Called with mu held.
func (p *Pacer) cutLocked(now time.Time, w float64, n int64, flight time.Duration) {
	p.wmax = max(w, pacerMinRate)
	p.held = 0
	p.peakWait.Store(p.waiting.Load()) // the senders since the cut
	// A refusal that came after a long time in flight was queued by the
	// broker first (RocketMQ refuses what waited over 200 ms in its send
	// queue, [TIMEOUT_CLEAN_QUEUE]): at pacerBeta of the rate, its queue
	// drains in about flight/(1-pacerBeta). Until then the rate stays at
	// the cut, and its refusals are the same overload. A refusal that
	// came at once (a token bucket's) leaves nothing queued.
	p.drain = 0
	if flight > pacerQueued {
		p.drain = time.Duration(float64(flight) / (1 - pacerBeta))
	}
	p.cutAt, p.cutN, p.cutA, p.cutIdle, p.refused, p.slow = now, n, p.attempts.Load(), p.idle.Load(), 0, false
	p.low, p.topSet = 0, false
	p.gapNs.Store(max(int64(pacerIdleGap), int64(4*float64(time.Second)/p.wmax)))
	p.stepAt, p.climb, p.climbAt = now, 0, now
	p.r = max(pacerBeta*p.wmax, pacerMinRate)
	p.lim = newTurns(now, p.r) // empty: the broker has just refused
	close(p.changed)
	p.changed = make(chan struct{})
}
