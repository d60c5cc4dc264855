package pace

import "time"

// turns is a clock of tickets: ticket k leaves at base + (k - k0)/r, so
// that the attempts waiting leave one every 1/r, in the order they came,
// and move with the rate when it changes (a waiting attempt reads its time
// again as it waits). After a pause, up to burst tickets are due at once,
// so that the attempts that waited leave a few at a time, never all
// together. It is not safe for concurrent use: the pacer's mu guards it.
type turns struct {
	r     float64
	base  time.Time
	k0    float64 // the ticket that leaves at base
	next  float64 // the next ticket free
	burst float64
	cuts  uint32 // resets so far: a ticket of an earlier one is void
}

// due is the ticket that leaves at now.
func (t *turns) due(now time.Time) float64 {
	return t.k0 + now.Sub(t.base).Seconds()*t.r
}

// setRate makes the tickets not yet gone leave at r from now on.
func (t *turns) setRate(now time.Time, r float64) {
	if t.r > 0 {
		t.k0 = t.due(now)
	}
	t.base, t.r = now, r
	t.burst = max(1, r*burstTime.Seconds())
}

// reset is a cut to r at now: the tickets not yet gone are void (their
// attempts take new ones), the first new one leaves 1/r after now, and
// none is due at once.
func (t *turns) reset(now time.Time, r float64) {
	t.setRate(now, r)
	t.base = now.Add(time.Duration(float64(time.Second) / r))
	t.next = t.k0
	t.cuts++
}

// take hands out the next ticket at now.
func (t *turns) take(now time.Time) float64 {
	k := max(t.next, t.due(now)-t.burst+1)
	t.next = k + 1
	return k
}

// at is when ticket k leaves.
func (t *turns) at(k float64) time.Time {
	return t.base.Add(time.Duration((k - t.k0) / t.r * float64(time.Second)))
}

// give returns ticket k, when it is the last handed out (an attempt that
// did not wait for it); a ticket given back out of order stays taken.
func (t *turns) give(k float64) {
	if t.next == k+1 {
		t.next = k
	}
}
