package pace

import "time"

// turns hands out the attempts' turns in order, one every 1/r: a turn
// keeps its time when the rate changes, and the next one is 1/r after the
// last. After a pause, up to burst turns are at once, so that the
// attempts that waited leave a few at a time, never all together. It is
// not safe for concurrent use: the pacer's mu guards it.
type turns struct {
	gap   time.Duration // 1/r
	burst int
	next  time.Time // the next turn free
}

// reset voids the turns handed out: the next is 1/r after now.
func (t *turns) reset(now time.Time, r float64) {
	t.setRate(r)
	t.next = now.Add(t.gap)
}

func (t *turns) setRate(r float64) {
	t.gap = time.Duration(float64(time.Second) / r)
	t.burst = max(1, int(r*burstTime.Seconds()))
}

// take hands out the next turn after now, now or earlier meaning at once.
func (t *turns) take(now time.Time) time.Time {
	at := t.next
	if floor := now.Add(-time.Duration(t.burst-1) * t.gap); at.Before(floor) {
		at = floor
	}
	t.next = at.Add(t.gap)
	return at
}

// give returns turn at, when it is the last handed out (an attempt that
// did not wait for it); a turn given back out of order stays taken.
func (t *turns) give(at time.Time) {
	if t.next.Sub(at) == t.gap {
		t.next = at
	}
}
