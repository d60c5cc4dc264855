package pace

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// This file holds the controller of one scope (pace.go says which scope a
// throttle belongs to). In a paragraph:
//
// A scope's pacer is off until the broker refuses, without a hint, at
// least engageOf of the scope's last 8 attempts while it still stores
// some. Then an episode opens, and the scope's attempts leave one at a
// time at a rate r (turns.go). r follows CUBIC's curve around wmax, the
// rate that got through:
//
//	r(t) = wmax·(1 − (1−β)·(1 − t/K)³)   while t < K: back from the cut
//	r(t) = wmax·(1 + (1−β)·((t − K)/K)³) after: flat at wmax, then faster above
//
// where t is the time since the last cut during which attempts waited for
// their turn: a rate that holds nobody back does not climb. A congestion
// signal cuts: wmax becomes the rate that got through, and t starts again,
// so r = β·wmax. The rate that got through is r at the signal, or lower,
// what the broker stored since the cut while anyone was sending, when that
// covers measureFor (between two refusals a rate limit is empty at both
// ends, so that is its capacity); but never under a wmax whose plateau held
// when only the probe above it was refused. The signals are a refusal and
// a store that waited longer than queued beyond the episode's quickest
// store (a broker that queues answers late before it answers no). One
// overload cuts once (TCP's one reduction per window): a signal counts only
// from an attempt that left after the overload that caused the last cut
// was over, which is at the cut, or later by the time the broker's queue
// takes to drain at β of its rate. The episode opens at the rate the broker
// stored lately, on its plateau (t = K), and ends when nobody waited for a
// turn for idleEnd, when the broker refuses everything since a cut that
// had time to measure (a spell that no rate gets through: each message
// waits its own schedule), or on a refusal with the broker's hint.
//
// Independent producers on one broker converge to equal shares without
// knowing of each other: an overload's few refusals fall on the producers
// in proportion to their rates, so the larger ones are cut more often, and
// all of them grow at the same relative speed.
//
// Every decision reads the broker's answers and the times attempts left
// and came back (the clock passed by the executor), never when a
// goroutine woke: a busy machine delays the attempts, and the rate read
// from what the broker stored follows.
//
// Off an episode, a store costs one atomic add and two atomic loads, and a
// turn one atomic load.

const (
	engageOf     = 4                      // refusals among the scope's last 8 attempts that open an episode: the majority's edge
	betaC        = 0.7                    // a cut is to this share of wmax: CUBIC's and AWS SDKs' β
	recoverInC   = 250 * time.Millisecond // K: from a cut back to wmax; past it, the probe's time scale
	window       = 250 * time.Millisecond // the rate that got through is what the broker stored over this
	queued       = 50 * time.Millisecond  // a store this much slower than the episode's quickest waited in the broker's queue
	idleEnd      = 2 * time.Second        // an episode in which nobody waited for a turn this long ends
	idleGap      = 20 * time.Millisecond  // a gap between attempts longer than this (and 4 turns) is nobody sending
	minRate      = 1.0                    // attempts per second, at least
	burstTime    = 2 * time.Millisecond   // after a pause, this much of the rate leaves at once (one turn at least)
	rateWindow   = time.Second            // the rate an episode opens at is read over one to two of this
	flightWindow = 10 * time.Second       // the round trip with the broker's queue empty is the quickest store's over one to two of this
)

const (
	histEvery = window / 8
	histLen   = 10
)

// Pacer is one scope's throttle state; its zero value has no episode. It
// is safe for concurrent use, and a nil *Pacer paces nothing.
type Pacer struct {
	on       atomic.Bool   // an episode is open: attempts wait for their turn
	stores   atomic.Int64  // attempts stored in this scope, ever
	refusals atomic.Int64  // off an episode, attempts refused in this scope
	ring     atomic.Uint32 // off an episode, the last 8 outcomes, newest in bit 0 (1: refused); 0 until a refusal
	rollAt   atomic.Int64  // unix ns at which the store samples roll next
	// The quickest store's time in flight (ns; 0: none yet) of this
	// flightWindow and the one before: the round trip with the broker's
	// queue empty, from which a store's wait in it is read.
	flight, flightPrev atomic.Int64

	mu       sync.Mutex
	flightAt time.Time     // the flight window's start
	marks    [2]mark       // off an episode, store samples rateWindow apart, the newest last: the rate an episode opens at
	hist     [histLen]mark // in an episode, store samples histEvery apart; hist[nhist%histLen] is the next
	nhist    int
	epoch    uint32 // turns handed out in an earlier epoch are void (a cut, the end)
	turns    turns
	r        float64 // the rate now
	wmax     float64 // the rate that got through at the last cut
	t        time.Duration
	// t is the curve's clock: time since the cut during which attempts
	// waited for their turn.
	cutAt   time.Time     // the last cut, or the opening
	cutN    int64         // stores at the cut
	quietAt time.Time     // signals of attempts that left before this belong to the last cut's overload
	active  time.Duration // time since the cut during which anyone sent
	lastAt  time.Time     // the last attempt seen (sent, or answered)
	stepAt  time.Time     // the curve's last step
	boundAt time.Time     // an attempt last waited for its turn
	tx      float64       // the rate stored over the last window, as of the last sample
}

type mark struct {
	at    time.Time
	n, nr int64 // stores and refusals then
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
			p.push(false)
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
	p.noteLocked(end)
	if p.nhist == 0 || !end.Before(p.hist[(p.nhist-1)%histLen].at.Add(histEvery)) {
		p.hist[p.nhist%histLen] = mark{at: end, n: n}
		p.nhist++
		p.tx = p.windowRate(end, n)
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
		p.refusals.Add(1)
		if bits.OnesCount32(p.push(true)) < engageOf {
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if !p.on.Load() {
			p.openLocked(end)
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on.Load() {
		return
	}
	p.noteLocked(end)
	if start.Before(p.quietAt) {
		return // the overload the last cut answered
	}
	p.signalLocked(end, p.queueWait(start, end))
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

// openLocked opens an episode at now, unless the broker stored nothing
// lately: then no rate gets through (a spell), and each refused message
// waits its own schedule. wmax is the rate the broker stored lately, read
// over a window at least (in a scope's first instant, its first burst is
// no rate of thousands a second: a rate too high costs a refusal of every
// sender in flight, one too low a probe's climb).
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
	p.ring.Store(0)
	p.nhist, p.tx = 0, 0
	p.lastAt, p.boundAt = now, now
	p.cutLocked(now, float64(n-from.n)/dt.Seconds(), 0)
}

// signalLocked is a congestion signal at now, of an attempt that waited
// wait in the broker's queue: it cuts, or ends a spell.
func (p *Pacer) signalLocked(now time.Time, wait time.Duration) {
	got, ok := p.gotLocked(now)
	if !ok {
		p.endLocked() // nothing stored for a while: a spell
		return
	}
	w := min(p.r, got)
	if p.r < p.wmax {
		// Refused before the rate was back at the last wmax: the
		// capacity fell, or others took some; CUBIC's fast convergence
		// leaves them room.
		w *= (1 + beta) / 2
	}
	p.cutLocked(now, w, wait)
}

// gotLocked is the rate the broker took lately, as of now: what it stored
// over the last window, or since the cut when that is sooner; false when it
// stored nothing over a window since the cut.
func (p *Pacer) gotLocked(now time.Time) (float64, bool) {
	n := p.stores.Load()
	since := now.Sub(p.cutAt)
	switch {
	case n == p.cutN && since >= window:
		return 0, false
	case since < p.gap():
		return p.r, true // too soon after the cut to read a rate
	}
	return p.windowRate(now, n), true
}

// windowRate is the rate stored over the last window before now (n stores
// then), or since the cut when that is sooner.
func (p *Pacer) windowRate(now time.Time, n int64) float64 {
	from := mark{at: p.cutAt, n: p.cutN}
	if now.Sub(from.at) > window {
		from.at = now
		for i := range min(p.nhist, histLen) {
			if m := p.hist[i]; now.Sub(m.at) <= window && m.at.Before(from.at) {
				from = m
			}
		}
	}
	dt := max(now.Sub(from.at), p.gap())
	return float64(n-from.n) / dt.Seconds()
}

// cutLocked sets wmax to w and the rate to β of it, and voids the turns
// handed out: they were handed out at the rate just refused. A signal of
// an attempt that waited wait in the broker's queue leaves the queue to
// drain at β of its rate first.
func (p *Pacer) cutLocked(now time.Time, w float64, wait time.Duration) {
	p.dbgf(now, "cut w=%.1f r=%.1f t=%v active=%v n=%d wait=%v", w, p.r, p.t, p.active, p.stores.Load()-p.cutN, wait)
	p.wmax = max(w, minRate)
	p.t, p.active = 0, 0
	p.cutAt, p.stepAt = now, now
	p.cutN = p.stores.Load()
	p.quietAt = now.Add(time.Duration(float64(wait) / (1 - beta)))
	p.r = max(beta*p.wmax, minRate)
	p.turns.reset(now, p.r)
}

// endLocked ends the episode: the turns handed out are void.
func (p *Pacer) endLocked() {
	p.dbgf(p.lastAt, "end")
	p.on.Store(false)
	p.ring.Store(0)
}

// stepLocked moves the rate along the curve to now, and ends an episode in
// which nobody waited for idleEnd.
func (p *Pacer) stepLocked(now time.Time) {
	p.noteLocked(now)
	// The clock runs from the end of the overload the cut answered (a
	// broker's queue drains at the cut's rate first), while attempts wait.
	if from := maxTime(p.stepAt, p.quietAt); now.After(from) {
		if gap := p.gap(); now.Sub(p.boundAt) <= gap {
			p.t += min(now.Sub(from), gap)
		}
	}
	p.stepAt = maxTime(p.stepAt, now)
	if now.Sub(p.boundAt) > idleEnd && now.Sub(p.cutAt) > idleEnd {
		p.endLocked()
		return
	}
	// The rate runs ahead of what the broker stores by 2x at most (AWS
	// SDKs' cap): a broker that queues answers late, and a probe that
	// waited for its answer would run far past what it takes.
	p.r = max(min(curve(p.wmax, p.t), 2*max(p.tx, p.wmax)), minRate)
	p.turns.setRate(now, p.r)
}

// noteLocked counts the time since the last attempt seen as sending time,
// unless it is a gap in which nobody sent.
func (p *Pacer) noteLocked(now time.Time) {
	if dt := now.Sub(p.lastAt); dt > 0 {
		if now.After(p.cutAt) {
			p.active += min(dt, p.gap(), now.Sub(p.cutAt))
		}
		p.lastAt = now
	}
}

// gap is the longest time between attempts that is not idle: idleGap, or
// four turns at a low rate.
func (p *Pacer) gap() time.Duration {
	return max(idleGap, time.Duration(4*float64(time.Second)/p.r))
}

// curve is CUBIC's rate t after a cut to β of wmax.
func curve(wmax float64, t time.Duration) float64 {
	x := float64(t-recoverIn) / float64(recoverIn)
	if x < 0 {
		return wmax * (1 + (1-beta)*x*x*x) // x³ < 0: from β·wmax up to wmax
	}
	return wmax * (1 + (1-beta)*math.Min(x*x*x, 1e6))
}

// push records an attempt's outcome in the ring and returns the ring.
func (p *Pacer) push(refused bool) uint32 {
	var b uint32
	if refused {
		b = 1
	}
	for {
		o := p.ring.Load()
		n := (o<<1 | b) & 0xff
		if p.ring.CompareAndSwap(o, n) {
			return n
		}
	}
}

// roll takes a sample of the stores (n at now) once per rateWindow.
func (p *Pacer) roll(now time.Time, n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now.UnixNano() < p.rollAt.Load() {
		return
	}
	p.marks[0], p.marks[1] = p.marks[1], mark{at: now, n: n - 1, nr: p.refusals.Load()}
	p.rollAt.Store(now.Add(rateWindow).UnixNano())
	if p.marks[0].at.IsZero() || now.Sub(p.flightAt) >= flightWindow {
		p.flightAt = now
		p.flightPrev.Store(p.flight.Swap(0))
	}
}

// queueWait is how long an attempt that left at start and was answered at
// end waited in the broker's queue: its time in flight over the quickest
// store's of the last flightWindow or two.
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

// rateNow is the episode's rate, 0 when none is open.
func (p *Pacer) rateNow() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on.Load() {
		return 0
	}
	return p.r
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
