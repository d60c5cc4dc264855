package pace

import "time"

// This file holds what the pacer reads of a broker that queues before it
// refuses (RocketMQ's send queue): the time its stores wait in flight.

// flew records the time in flight of a stored attempt while an episode is
// open: one that took pacerQueued longer than the episode's quickest store
// waited in the broker's queue, and while stores wait there the rate does
// not grow (a queue answers late before it answers no: grown on its
// convex side until the first refusal, the rate reached twice a 100/s
// send queue's capacity, and each overshoot refused a dozen requests).
func (p *Pacer) flew(start, end time.Time) {
	if p == nil || !p.on.Load() {
		return
	}
	d := max(int64(end.Sub(start)), 1) // 0 marks none yet
	for {
		m := p.minFlight.Load()
		if (m != 0 && m <= d) || p.minFlight.CompareAndSwap(m, d) {
			break
		}
	}
	if d > p.minFlight.Load()+int64(pacerQueued) {
		p.queuedAt.Store(end.UnixNano())
		p.mu.Lock()
		p.queuedLocked(end, end.Sub(start))
		p.mu.Unlock()
	}
}

// queuedLocked cuts the rate when a store waited in the broker's queue
// while the rate is over what the broker stored in the last second: the
// queue grows, and refuses what waits too long in it, so the cut comes
// before the refusals (a queue answers late before it answers no). It cuts
// as a refusal does, from what got through, at most once per flight of the
// store. Against a 100/s send queue, sends failed for want of attempts
// (3 each): 0, 0, 0 of 2,000, against 0-5 before, and 44-88 refusals
// against 124-142.
func (p *Pacer) queuedLocked(now time.Time, flight time.Duration) {
	if !p.on.Load() || now.Sub(p.cutAt) < max(pacerMinGap, p.drain, flight) {
		return
	}
	n := p.stores.Load()
	acc, k := p.recentRate(now, n, time.Second)
	if k == 0 || p.r <= acc {
		return
	}
	p.cutLocked(now, acc, n, flight)
	// Not held: nothing was refused, and the queue is short (a store
	// waited pacerQueued in it). (Held while a refused queue would
	// drain, a 200/s send queue got 95.5% of its capacity.) The rate and
	// its turns start at pacerShallow of what the broker stores; the
	// cubic takes the rate from its next step. Measured against a
	// rocketry broker with a 100/s send queue: 96% of its capacity in 3
	// runs, against 91-93% in 4 with the turns of a plain cut.
	p.drain = 0
	p.r = max(pacerShallow*p.wmax, pacerMinRate)
	p.lim = newTurns(now, p.r)
}

// queueing reports whether a store waited in the broker's queue within d
// before now.
func (p *Pacer) queueing(now time.Time, d time.Duration) bool {
	return now.UnixNano()-p.queuedAt.Load() < int64(d)
}
