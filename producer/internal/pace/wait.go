package pace

import (
	"context"

	"github.com/rocketry-go/rocketry/producer/internal/clock"
	"github.com/rocketry-go/rocketry/producer/internal/deadline"
)

// wait makes an attempt that is about to leave wait its turn while an
// episode is open: false when the turn does not fit before ctx's deadline
// (late; deadline.Fits; nothing is waited then) or ctx ended during the
// wait. A turn voided while it was waited for (a cut) is taken again from
// the new rate when it comes; a turn of an episode that ended is kept.
func (p *Pacer) wait(ctx context.Context, clk clock.Clock) (ok bool, late bool) {
	if p == nil {
		return true, false
	}
	for p.on.Load() {
		p.mu.Lock()
		if !p.on.Load() {
			p.mu.Unlock()
			break
		}
		now := clk.Now()
		p.stepLocked(now)
		if !p.on.Load() {
			p.mu.Unlock()
			break
		}
		at := p.turns.take(now)
		if !at.After(now) {
			p.mu.Unlock()
			return true, false
		}
		if !deadline.Fits(ctx, at) {
			p.turns.give(at)
			p.mu.Unlock()
			return false, true
		}
		p.boundAt = now
		epoch := p.epoch
		p.mu.Unlock()
		if !clk.Sleep(ctx, at.Sub(now)) {
			p.mu.Lock()
			if p.epoch == epoch {
				p.turns.give(at)
			}
			p.mu.Unlock()
			return false, false
		}
		p.mu.Lock()
		kept := p.epoch == epoch || !p.on.Load()
		p.mu.Unlock()
		if kept {
			return true, false
		}
	}
	return true, false
}
