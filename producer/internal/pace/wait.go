package pace

import (
	"context"

	"github.com/rocketry-go/rocketry/producer/internal/clock"
	"github.com/rocketry-go/rocketry/producer/internal/deadline"
)

// wait makes an attempt that is about to leave wait its turn while an
// episode is open: false when the turn does not fit before ctx's deadline
// (late; deadline.Fits; nothing more is waited then) or ctx ended during
// the wait. The attempt takes a ticket and reads its time again as it
// waits, every histEvery at least, so that it moves with the rate; a cut
// voids it (a new one is taken), and the end of the episode lets it go.
func (p *Pacer) wait(ctx context.Context, clk clock.Clock) (ok bool, late bool) {
	if p == nil || !p.on.Load() {
		return true, false
	}
	clk = clock.Or(clk)
	p.mu.Lock()
	if !p.on.Load() {
		p.mu.Unlock()
		return true, false
	}
	now := clk.Now()
	p.stepLocked(now)
	k, cuts := p.turns.take(now), p.turns.cuts
	for {
		if !p.on.Load() {
			p.mu.Unlock()
			return true, false
		}
		if cuts != p.turns.cuts {
			k, cuts = p.turns.take(now), p.turns.cuts
		}
		at := p.turns.at(k)
		if !at.After(now) {
			p.mu.Unlock()
			return true, false
		}
		if !deadline.Fits(ctx, at) {
			p.turns.give(k)
			p.mu.Unlock()
			return false, true
		}
		p.boundAt = now
		p.mu.Unlock()
		if !clk.Sleep(ctx, min(at.Sub(now), histEvery)) {
			p.mu.Lock()
			if cuts == p.turns.cuts {
				p.turns.give(k)
			}
			p.mu.Unlock()
			return false, false
		}
		p.mu.Lock()
		now = clk.Now()
		if p.on.Load() {
			p.stepLocked(now)
		}
	}
}
