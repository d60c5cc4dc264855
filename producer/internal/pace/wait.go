package pace

import (
	"context"
	"time"

	"github.com/rocketry-go/rocketry/producer/internal/deadline"
)

// This file holds the pacer's side that attempts meet: the wait for a
// turn, and the hint that ends an episode (pacer.go has the rate).

// NewTimer makes the timer of every wait for a turn; tests swap it (and
// restore it with t.Cleanup), as the producer's own waits' timer, to see
// the waits without taking them.
var NewTimer = time.NewTimer

// wait makes an attempt that is about to start wait its turn while an
// episode is open: false when the turn does not fit before ctx's deadline
// (late; deadline.Fits; nothing is waited then) or ctx ended during the
// wait. When the turns are voided during the wait (a cut, the end), the
// turn is taken again.
func (p *Pacer) wait(ctx context.Context) (ok bool, late bool) {
	if p == nil {
		return true, false
	}
	for p.on.Load() {
		p.mu.Lock()
		now := time.Now() // under mu: the limiter's clock never goes back
		if !p.on.Load() {
			p.mu.Unlock()
			break
		}
		p.stepLocked(now)
		if !p.on.Load() {
			p.mu.Unlock()
			break
		}
		lim := p.lim
		at := lim.take(now)
		changed := p.changed
		d := at.Sub(now)
		if d <= 0 {
			p.mu.Unlock()
			return true, false
		}
		if !deadline.Fits(ctx, at) {
			lim.give(at)
			p.mu.Unlock()
			return false, true
		}
		p.mu.Unlock()
		p.binding.Store(true)
		p.lastBind.Store(now.UnixNano())
		if w := p.waiting.Add(1); w > p.peakWait.Load() {
			p.peakWait.Store(w) // a lost race loses one of many
		}
		t := NewTimer(d)
		select {
		case <-t.C:
			p.waiting.Add(-1)
			return true, false
		case <-ctx.Done():
			p.waiting.Add(-1)
			t.Stop()
			p.mu.Lock()
			lim.give(at)
			p.mu.Unlock()
			return false, false
		case <-changed:
			p.waiting.Add(-1)
			t.Stop() // the turn is void: take a new one
		}
	}
	return true, false
}

// hinted records a throttle with the broker's hint: a broker that says when
// to come back is followed, not paced, so an episode ends.
func (p *Pacer) hinted() {
	if p == nil || !p.on.Load() {
		return
	}
	p.mu.Lock()
	if p.on.Load() {
		p.endLocked()
	}
	p.mu.Unlock()
}

// rateNow is the episode's rate, 0 when none is open (for tests and
// events).
func (p *Pacer) rateNow() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on.Load() {
		return 0
	}
	return p.r
}
