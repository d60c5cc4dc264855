package pace

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// The controller of one scope, stated in full in docs/pacing.md: off until
// engageOf of the scope's last 8 attempts are refused without a hint; then
// attempts leave one at a time (turns.go) at a rate r on CUBIC's curve
// around wmax, the rate that got through at the last cut, capped at twice
// what the broker stored over the last window. A refusal, or a store that
// waited over queued in the broker's queue, cuts once per overload; in a
// cut's dip, refusals under 1 in noiseOf lower wmax, and a steady share
// under 2 in noiseOf is not the rate's and ends the episode. Decisions
// read the broker's answers and the times attempts left and came back,
// never when a goroutine woke.

const (
	engageOf     = 4                      // refusals among the scope's last 8 attempts that open an episode: the majority's edge
	beta         = 0.8                    // a cut is to this share of wmax (CUBIC's 0.7 spent more of a small bucket's capacity in its dips)
	recoverIn    = 250 * time.Millisecond // K: from a cut back to wmax; past it, the probe's time scale
	recoverMax   = 500 * time.Millisecond // K, at most: it doubles while the rate that got through holds from cut to cut
	window       = 250 * time.Millisecond // the rate that got through is what the broker stored over this
	queued       = 50 * time.Millisecond  // a store that waited this long in the broker's queue is a signal: a quarter of RocketMQ's 200 ms
	noiseOf      = 16                     // in a cut's dip, refusals under 1 in this many are noise; under 2 in it, twice over, not the rate's; noise lowers wmax by its share times (1−β)·this
	idleEnd      = 2 * time.Second        // an episode in which nobody waited for a turn this long ends
	burstTime    = 2 * time.Millisecond   // after a pause, this much of the rate leaves at once (one turn at least)
	flightWindow = 10 * time.Second       // the round trip with the broker's queue empty is the quickest store's over one to two of this
	minRate      = 1.0                    // attempts per second, at least (a guard, not a tunable)

	// Derived from the tunables above.
	rateWindow = 4 * window // off an episode, store samples this far apart: the rate an episode opens at
	histEvery  = window / 8 // in an episode, store samples this far apart
	histLen    = 10         // of them: a window and a little more
)

// Pacer is one scope's throttle state; its zero value has no episode. It
// is safe for concurrent use, and a nil *Pacer paces nothing.
type Pacer struct {
	on                 atomic.Bool   // an episode is open: attempts wait for their turn
	again              atomic.Bool   // the last one ended on refusals not the rate's: a refusal may open the next (worseLocked)
	stores             atomic.Int64  // attempts stored in this scope, ever
	ring               atomic.Uint32 // off an episode, the last 8 outcomes, newest in bit 0 (1: refused); 0 until a refusal
	rollAt             atomic.Int64  // unix ns at which the store samples roll next
	flight, flightPrev atomic.Int64  // the quickest store's time in flight (ns; 0: none yet), this flightWindow and the last

	mu                sync.Mutex
	flightAt          time.Time     // the flight window's start
	marks             [2]mark       // off an episode, store samples rateWindow apart, the newest last
	hist              [histLen]mark // in an episode, store samples histEvery apart; hist[nhist%histLen] is the next
	nhist             int
	tx                float64 // the rate stored over the last window, as of the last sample
	turns             turns
	r                 float64       // the rate now
	wmax              float64       // the rate that got through at the last cut
	t                 time.Duration // the curve's clock: time since the cut's overload ended during which attempts waited
	k                 time.Duration // K now: recoverIn, doubled up to recoverMax while wmax holds
	cut               mark          // the last cut (or the opening), and the stores then
	quietAt           time.Time     // signals of attempts that left before this belong to the last cut's overload
	stepAt            time.Time     // the curve's last step
	boundAt           time.Time     // an attempt last waited for its turn
	storedAt          time.Time     // the last store in the episode (its opening, before any), or the first refusal after a silence
	refAt             time.Time     // the last refusal in the episode
	answered, refused int64         // in the episode, attempts answered and refused
	cutA, cutF        int64         // answered and refused at the last cut outside a dip (or the opening)
	dipCut            bool          // a cut since then was of a refusal in a dip
	dips              uint32        // the last answers given in dips, across cuts, newest in bit 0 (1: refused)
	ndips             int           // how many answers dips has seen in the episode
	opened            mark          // the episode's opening
	endW              float64       // the last episode's stored rate, when it ended on refusals not the rate's
	endAt             time.Time     // and when
}

type mark struct {
	at time.Time
	n  int64 // stores then
}

// stored counts an attempt that left at start and was stored at end.
func (p *Pacer) stored(start, end time.Time) {
	if p == nil {
		return
	}
	n := p.stores.Add(1)
	flight := int64(end.Sub(start))
	for f := p.flight.Load(); f == 0 || flight < f; f = p.flight.Load() {
		if p.flight.CompareAndSwap(f, max(flight, 1)) {
			break
		}
	}
	if !p.on.Load() {
		if p.ring.Load() != 0 {
			p.push(0)
		}
		if end.UnixNano() >= p.rollAt.Load() {
			p.roll(end, n)
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on.Load() {
		return
	}
	p.answered++
	if p.t < p.k {
		p.dips <<= 1
		p.ndips++
	}
	p.storedAt = end
	if p.nhist == 0 || !end.Before(p.hist[(p.nhist-1)%histLen].at.Add(histEvery)) {
		p.hist[p.nhist%histLen] = mark{at: end, n: n}
		p.nhist++
		from, _ := p.oldest(end, window, time.Time{}, mark{at: end, n: n})
		p.tx = float64(n-from.n) / window.Seconds()
	}
	if wait := p.queueWait(start, end); wait > queued && !start.Before(p.quietAt) {
		p.signalLocked(end, wait)
	}
}

// throttled records a refusal without a hint of an attempt that left at
// start and was answered at end.
func (p *Pacer) throttled(start, end time.Time) {
	if p == nil {
		return
	}
	if !p.on.Load() {
		if engage := bits.OnesCount32(p.push(1)) >= engageOf; engage || p.again.Load() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if !p.on.Load() && (engage || p.worseLocked(end)) {
				p.openLocked(end)
			}
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on.Load() {
		return
	}
	p.answered++
	p.refused++
	if p.t < p.k {
		p.dips = p.dips<<1 | 1
		p.ndips++
	}
	if start.Before(p.quietAt) {
		return // the overload the last cut answered
	}
	if end.Sub(p.refAt) >= window {
		p.storedAt = end // after a silence (every sender asleep on its own schedule), not a spell's
	}
	p.refAt = end
	if end.Sub(p.storedAt) >= window {
		p.endLocked() // refusals for a window without a store: a spell no rate gets through
		return
	}
	if p.stores.Load() == p.cut.n {
		return // nothing stored since the cut: the same overload (a spell's refusals)
	}
	if p.t < p.k {
		// In a cut's dip: the share refused is counted since the last cut
		// outside a dip, over 2·noiseOf attempts at least.
		a, f := p.answered-p.cutA, p.refused-p.cutF
		switch {
		case a < 2*noiseOf:
			if p.dipCut {
				return // too soon to tell a share; the cut once more is made
			}
		case f*noiseOf < a:
			// Noise: no cut, but wmax (and r with it) lower by the share
			// refused times (1−β)·noiseOf, a cut's depth at the bound.
			p.wmax = max(p.wmax*(1-(1-beta)*noiseOf*float64(f)/float64(a)), minRate)
			return
		case f*noiseOf < 2*a && p.dipCut:
			p.notTheRatesLocked(end)
			return
		}
		p.dipCut = true
		p.signalLocked(end, p.queueWait(start, end))
		return
	}
	if p.ndips >= 2*noiseOf && p.wmax*p.k.Seconds() < 2*noiseOf {
		// Dips too short to tell a share (wmax·K under 2·noiseOf attempts):
		// the last 2·noiseOf answers given in dips, pooled across cuts,
		// judge a refusal after one.
		if f := bits.OnesCount32(p.dips); f*noiseOf >= 2*noiseOf && f*noiseOf < 3*2*noiseOf {
			p.notTheRatesLocked(end)
			return
		}
	}
	p.dipCut = false
	p.cutA, p.cutF = p.answered, p.refused
	p.signalLocked(end, p.queueWait(start, end))
}

// hinted records a refusal with a hint: a broker that says when to come
// back is followed, not paced, so an episode ends.
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

// openLocked opens an episode at now at the rate stored since the older
// store sample (over a window at least), a floor, with the probe above it
// under way (t = 2K). If nothing was stored since (a spell), none opens.
func (p *Pacer) openLocked(now time.Time) {
	n := p.stores.Load()
	from := p.marks[0]
	if from.at.IsZero() {
		from = p.marks[1]
	}
	if from.at.IsZero() || n == from.n {
		return
	}
	dt := max(now.Sub(from.at), window)
	p.on.Store(true)
	p.again.Store(false)
	p.opened = mark{at: now, n: n}
	p.ring.Store(0)
	p.nhist, p.tx = 0, 0
	p.boundAt, p.storedAt, p.dipCut = now, now, false
	p.dips, p.ndips = 0, 0
	p.cutA, p.cutF = p.answered, p.refused
	p.cutLocked(now, float64(n-from.n)/dt.Seconds(), 0)
	p.k, p.t = recoverIn, 2*recoverIn
	p.r = curve(p.wmax, p.t, p.k)
	p.turns.reset(now, p.r)
}

// signalLocked is a congestion signal at now, of an attempt that waited
// wait in the broker's queue: a cut to what got through (at most r), or,
// untold, to (1+β)/2 of r: a rate refused is over what the broker takes.
func (p *Pacer) signalLocked(now time.Time, wait time.Duration) {
	w := p.r * (1 + beta) / 2
	if got, ok := p.gotLocked(now); ok {
		w = min(p.r, got)
	}
	p.cutLocked(now, w, wait)
}

// gotLocked is the rate stored over the last window to now (since the
// cut, if sooner), and whether store samples cover most of it.
func (p *Pacer) gotLocked(now time.Time) (float64, bool) {
	span := min(now.Sub(p.cut.at), window)
	from, samples := p.oldest(now, span, p.cut.at, p.cut)
	if samples < int(span/histEvery)/2 || samples < 2 {
		return 0, false
	}
	dt := max(now.Sub(from.at), p.gap())
	return float64(p.stores.Load()-from.n) / dt.Seconds(), true
}

// oldest is the oldest store sample at most span before now and not before
// floor (else from), and how many such samples there are.
func (p *Pacer) oldest(now time.Time, span time.Duration, floor time.Time, from mark) (mark, int) {
	samples := 0
	for i := range min(p.nhist, histLen) {
		if m := p.hist[i]; now.Sub(m.at) <= span && !m.at.Before(floor) {
			samples++
			if now.Sub(from.at) > span || m.at.Before(from.at) {
				from = m
			}
		}
	}
	return from, samples
}

// cutLocked sets wmax to w and the rate to β of it, and voids the turns
// handed out. K doubles when w is within 5% of the last wmax, else is
// recoverIn. Signals count again once a queue's wait has drained at β.
func (p *Pacer) cutLocked(now time.Time, w float64, wait time.Duration) {
	if w >= 0.95*p.wmax && w <= 1.05*p.wmax {
		p.k = min(2*p.k, recoverMax)
	} else {
		p.k = recoverIn
	}
	p.wmax = max(w, minRate)
	p.t = 0
	p.cut, p.stepAt = mark{at: now, n: p.stores.Load()}, now
	p.quietAt = now.Add(time.Duration(float64(wait) / (1 - beta)))
	p.r = max(beta*p.wmax, minRate)
	p.turns.reset(now, p.r)
}

// endLocked ends the episode: the turns handed out are void.
func (p *Pacer) endLocked() {
	p.on.Store(false)
	p.ring.Store(0)
}

// notTheRatesLocked ends the episode at now on refusals not the rate's,
// and keeps its stored rate (over a window at least) for worseLocked.
func (p *Pacer) notTheRatesLocked(now time.Time) {
	p.endLocked()
	if d := now.Sub(p.opened.at); d >= window {
		p.again.Store(true)
		p.endW, p.endAt = float64(p.stores.Load()-p.opened.n)/d.Seconds(), now
	}
}

// worseLocked tells, at a refusal at now after an episode ended on
// refusals not the rate's, whether the scope has since stored (over a
// window at least) under β of the episode's rate: then one opens again.
func (p *Pacer) worseLocked(now time.Time) bool {
	from := p.marks[0]
	if from.at.Before(p.endAt) {
		from = p.marks[1]
	}
	if from.at.Before(p.endAt) || now.Sub(from.at) < window {
		return false
	}
	return float64(p.stores.Load()-from.n)/now.Sub(from.at).Seconds() < beta*p.endW
}

// stepLocked moves the rate along the curve to now, and ends an episode in
// which nobody waited for idleEnd.
func (p *Pacer) stepLocked(now time.Time) {
	// t runs from the end of the cut's overload, while attempts wait.
	from := p.stepAt
	if p.quietAt.After(from) {
		from = p.quietAt
	}
	if gap := p.gap(); now.After(from) && now.Sub(p.boundAt) <= gap {
		p.t += min(now.Sub(from), gap)
	}
	if now.After(p.stepAt) {
		p.stepAt = now
	}
	if now.Sub(p.boundAt) > idleEnd && now.Sub(p.cut.at) > idleEnd {
		p.endLocked()
		return
	}
	// At most 2x what the broker stores (AWS SDKs' cap), when tx can be
	// read (4 stores a window at least).
	r := curve(p.wmax, p.t, p.k)
	if p.tx*window.Seconds() >= 4 {
		r = min(r, 2*max(p.tx, p.wmax))
	}
	p.r = max(r, minRate)
	p.turns.setRate(now, p.r)
}

// gap is the longest time between attempts that is not idle: histEvery, or
// four turns at a low rate.
func (p *Pacer) gap() time.Duration {
	return max(histEvery, time.Duration(4*float64(time.Second)/p.r))
}

// curve is CUBIC's rate t after a cut to β of wmax: β·wmax at t = 0, wmax
// at t = k, then above it (x³ capped to stay finite).
func curve(wmax float64, t, k time.Duration) float64 {
	x := float64(t-k) / float64(k)
	return wmax * (1 + (1-beta)*math.Min(x*x*x, 1e6))
}

// push records an attempt's outcome in the ring (b: 1 if refused) and
// returns the ring.
func (p *Pacer) push(b uint32) uint32 {
	for {
		o := p.ring.Load()
		n := (o<<1 | b) & 0xff
		if p.ring.CompareAndSwap(o, n) {
			return n
		}
	}
}

// roll takes a sample of the stores (n at now) once per rateWindow, and
// starts a new flight window once per flightWindow.
func (p *Pacer) roll(now time.Time, n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now.UnixNano() < p.rollAt.Load() {
		return
	}
	p.marks[0], p.marks[1] = p.marks[1], mark{at: now, n: n - 1}
	p.rollAt.Store(now.Add(rateWindow).UnixNano())
	if p.marks[0].at.IsZero() || now.Sub(p.flightAt) >= flightWindow {
		p.flightAt = now
		p.flightPrev.Store(p.flight.Swap(0))
	}
}

// queueWait is how long an attempt that left at start and was answered at
// end waited in the broker's queue: its flight over the quickest store's.
func (p *Pacer) queueWait(start, end time.Time) time.Duration {
	base := p.flight.Load()
	if prev := p.flightPrev.Load(); prev != 0 && (base == 0 || prev < base) {
		base = prev
	}
	if base == 0 {
		return 0
	}
	return max(end.Sub(start)-time.Duration(base), 0)
}
