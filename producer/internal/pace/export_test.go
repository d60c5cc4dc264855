package pace

import "time"

// Hold opens an episode on p at rate r from now, its next turn free at
// now and one every 1/r after it: for the tests of the turns.
func (p *Pacer) Hold(now time.Time, r float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.on.Store(true)
	p.boundAt, p.storedAt = now, now
	p.cutLocked(now, r/beta, 0)
	p.turns.base = now
}

// rateNow is the episode's rate, 0 when none is open.
func (p *Pacer) rateNow() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on.Load() {
		return 0
	}
	return p.r
}
