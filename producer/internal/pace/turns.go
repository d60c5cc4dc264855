package pace

import (
	"time"
)

// This file holds the pacer's turns: attempts are handed out one by one at
// the rate, in order, and keep their times when the rate changes (pacer.go
// says when they are taken again).

// turns hands out the attempts' turns at a rate r, in order, one every
// 1/r: a turn keeps its time when the rate changes. (x/time/rate's Limiter
// moves its debt of turns handed out to the new rate instead, so that
// after a raise new turns fall among the old ones: as the rate climbed
// after a cut, attempts left at up to twice the rate, and a bucket with a
// burst of 5 refused them at a quarter of its capacity, in
// shapes_test.go's simulation.) After a pause,
// up to burstFor(r) turns are at once. It is not safe for concurrent
// use: the pacer's mu guards it.
type turns struct {
	r     float64
	dealt float64       // the rate when the turns were handed out afresh
	gap   time.Duration // 1/r
	burst int
	next  time.Time // the next turn free
}

// newTurns returns turns at rate r whose first turn is 1/r after now.
func newTurns(now time.Time, r float64) *turns {
	t := &turns{}
	t.setRate(r)
	t.next = now.Add(t.gap)
	t.dealt = r
	return t
}

// redeal voids the turns handed out: the next is at most 1/r after now.
func (t *turns) redeal(now time.Time) {
	if n := now.Add(t.gap); n.Before(t.next) {
		t.next = n
	}
	t.dealt = t.r
}

func (t *turns) setRate(r float64) {
	t.r, t.gap, t.burst = r, time.Duration(float64(time.Second)/r), burstFor(r)
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
	if t.next.Sub(at) <= t.gap && !t.next.Before(at) {
		t.next = at
	}
}

// burstFor is the limiter's burst at rate r: 2 ms of it, at least 1, so
// that the attempts waiting are released a few at a time.
func burstFor(r float64) int {
	return max(1, int(r/500))
}
