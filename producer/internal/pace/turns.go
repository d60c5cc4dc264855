package pace

import (
	"context"
	"time"

	"github.com/rocketry-go/rocketry/producer/internal/clock"
	"github.com/rocketry-go/rocketry/producer/internal/deadline"
)

// wait holds an attempt about to leave until its turn while an episode is
// open: false when the turn does not fit before ctx's deadline (late; then
// nothing is waited) or ctx ended. Its ticket's time is read again every
// histEvery, so it moves with the rate; a cut voids it (a new one is
// taken), and the episode's end lets the attempt go.
func (p *Pacer) wait(ctx context.Context, clk clock.Clock) (ok bool, late bool) {
	if p == nil || !p.on.Load() {
		return true, false
	}
	clk = clock.Or(clk)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on.Load() {
		return true, false
	}
	now := clk.Now()
	p.stepLocked(now)
	k, cuts := p.turns.take(now), p.turns.cuts
	for {
		if !p.on.Load() {
			return true, false
		}
		if cuts != p.turns.cuts {
			k, cuts = p.turns.take(now), p.turns.cuts
		}
		at := p.turns.at(k)
		if !at.After(now) {
			return true, false
		}
		if !deadline.Fits(ctx, at) {
			p.turns.give(k)
			return false, true
		}
		p.boundAt = now
		p.mu.Unlock()
		slept := clk.Sleep(ctx, min(at.Sub(now), histEvery))
		p.mu.Lock()
		if !slept {
			if cuts == p.turns.cuts {
				p.turns.give(k)
			}
			return false, false
		}
		now = clk.Now()
		if p.on.Load() {
			p.stepLocked(now)
		}
	}
}

// turns is a clock of tickets: ticket k leaves at base + (k - k0)/r, so
// that the attempts waiting leave one every 1/r, in the order they came,
// and move with the rate when it changes. After a pause, up to burst
// tickets are due at once. The pacer's mu guards it.
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

// reset is a cut to r at now: the tickets not yet gone are void, the first
// new one leaves 1/r after now, and none is due at once.
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

// give returns ticket k when it is the last handed out; a ticket given
// back out of order stays taken.
func (t *turns) give(k float64) {
	if t.next == k+1 {
		t.next = k
	}
}
