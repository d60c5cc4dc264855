package pace

import (
	"math/bits"
	"time"
)

// This file holds what the pacer knows of a scope's past attempts: the ring
// of their last outcomes, the idle gaps between them, and the samples of
// stores its rates are read from.

type sample struct {
	at   time.Time
	n    int64
	idle int64
}

// note records an attempt at now: a gap since the last one longer than
// gapNs is idle time, when nobody sent (every sender waiting out its own
// schedule), which the rates that were getting through leave out.
func (p *Pacer) note(now time.Time) {
	ns := now.UnixNano()
	prev := p.lastNs.Load()
	for {
		if ns <= prev {
			// Attempts are recorded out of order (a store by its
			// start, a refusal by its end): only time past the latest
			// one recorded can be a gap. (Counting gaps back and forth
			// made a queue's 200 ms waits 11 s of idle in 0.24 s.)
			return
		}
		if p.lastNs.CompareAndSwap(prev, ns) {
			break
		}
		prev = p.lastNs.Load()
	}
	gap := p.gapNs.Load()
	if gap == 0 {
		gap = int64(pacerIdleGap)
	}
	if prev > 0 && ns-prev > gap {
		p.idle.Add(ns - prev - gap)
		p.idleAt.Store(ns)
	}
}

// push records an attempt's outcome in the ring and returns the ring.
func (p *Pacer) push(refused bool) uint32 {
	var b uint32
	if refused {
		b = 1
	}
	for {
		o := p.ring.Load()
		n := (o<<1 | b) & (1<<pacerRing - 1)
		if p.ring.CompareAndSwap(o, n) {
			return n
		}
	}
}

// sustained reports whether ring says refusals are a sustained share of
// the attempts.
func sustained(ring uint32) bool {
	n := bits.OnesCount32(ring)
	return n >= pacerEngageOf || (n >= pacerRun && 2*n >= bits.Len32(ring))
}

func (p *Pacer) sample(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now.UnixNano() < p.nextSample.Load() {
		return
	}
	p.hist[p.nhist%pacerHistory] = sample{at: now, n: p.stores.Load(), idle: p.idle.Load()}
	p.nhist++
	p.nextSample.Store(now.Add(pacerSample).UnixNano())
}

// recentRate is the store rate over the last window of history, idle time
// left out, counting at least pacerSample of time (so a first burst does
// not read as a rate). Called with mu held.
func (p *Pacer) recentRate(now time.Time, n int64, window time.Duration) (float64, int64) {
	idle := p.idle.Load()
	oldest := sample{at: now, n: n, idle: idle}
	for i := 0; i < min(p.nhist, pacerHistory); i++ {
		s := p.hist[i]
		if now.Sub(s.at) <= window && s.at.Before(oldest.at) {
			oldest = s
		}
	}
	dt := max(now.Sub(oldest.at)-time.Duration(idle-oldest.idle), pacerSample)
	return float64(n-oldest.n) / dt.Seconds(), n - oldest.n
}
