package pace

import "time"

// This file holds what the tests of the pacer's users need of its state,
// which they cannot reach: the producer's tests of which attempts wait
// their turn.

// Hold opens an episode on p whose rate is r, its next turn free at now
// and one every 1/r after it, as if the rate had just been cut to r at
// now; it reports whether the episode opened. It is for tests.
func (p *Pacer) Hold(now time.Time, r float64) bool {
	// The episode opens as a run of refusals after 200 ms of stores at
	// 100 a second, a second before now, would open it.
	start := now.Add(-time.Second)
	const n = 20
	for i := range n {
		p.stored(start.Add(time.Duration(i) * 200 * time.Millisecond / n))
	}
	at := start.Add(200 * time.Millisecond)
	for range pacerRun {
		p.throttled(at, at)
	}
	if !p.on.Load() {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.r = r
	p.lim = newTurns(now.Add(-time.Duration(float64(time.Second)/r)), r)
	p.cutAt = now
	return true
}
