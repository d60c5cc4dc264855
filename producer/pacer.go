package producer

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// This file holds the pacer: the throttle state of one endpoint, as gRPC's
// connection backoff belongs to a connection and Kafka's client-side
// throttling (KIP-219) mutes a connection, not a request.
//
// Without it, each send waits out its own throttle schedule: every sender
// refused in the same instant waits the same unjittered first second, and
// all of them come back together, take the broker's burst and are refused
// together again, a lock near the burst rate (a quarter of a 2,000/s
// broker's capacity, measured). With it, the first throttle without a hint
// opens an episode on the endpoint: from then on every attempt to that
// endpoint, first attempts included, waits its turn at a rate that follows
// what the broker accepts, so that sends queue in the client instead of
// being refused, and are released one by one, never all at once.
//
// The rate is found as TCP finds a window. An episode starts in slow start,
// at half the rate the endpoint stored at just before, doubling every
// 50 ms. A broker that throttles has no tokens left at that instant, so
// between two throttles (both with an empty bucket) it stored exactly its
// capacity times the time between them, whatever its burst: that count over
// that time is the estimate, and the rate is set just under it. Then the rate probes upwards,
// slowly (+0.3% every 100 ms in which an attempt had to wait for it; +5%
// while under 90% of the last estimates), until the next throttle measures
// again. A throttle less than 50 ms after the last counted one
// only halves the rate (too short to measure). After pacerStall without a
// throttle while attempts wait, the broker has room the probe has not found
// (its spell of refusals is over, or its capacity grew): slow start again,
// so that a pace learnt in a bad spell holds the sends back for a fraction
// of a second, not for the rest of the episode. The episode ends after
// pacerQuiet without a throttle.
//
// A throttle that carries the broker's own hint (google.rpc.RetryInfo) ends
// the episode: the broker says when to come back, each send already waits
// for that, and pacing on top would put the senders it released behind new
// sends.
//
// The pacer costs the fast path one atomic load per attempt and one atomic
// add per stored message while no episode is open.

const (
	pacerSample    = 100 * time.Millisecond // history of stores, one sample per
	pacerHistory   = 10                     // samples kept: a second
	pacerMinGap    = 50 * time.Millisecond  // least time between two estimates
	pacerSlowStep  = 50 * time.Millisecond  // slow start doubles the rate this often
	pacerProbe     = 100 * time.Millisecond // probing raises the rate this often
	pacerRaise     = 1.003                  // by this factor
	pacerRecover   = 1.05                   // or this one, while far under the last peak
	pacerFar       = 0.9                    // far: under this share of the peak
	pacerPeakDecay = 0.9                    // the peak fades by this at each estimate
	pacerRecent    = 250 * time.Millisecond // the window of the recent store rate
	pacerMargin    = 0.97                   // the rate after an estimate: just under it
	pacerStall     = 2 * time.Second        // without a throttle for this long, slow start again
	pacerQuiet     = 30 * time.Second       // an episode ends after this without a throttle
	pacerMinRate   = 1.0                    // attempts per second, at least
)

// pacer is one endpoint's throttle state; its zero value has no episode.
// It is safe for concurrent use.
type pacer struct {
	on         atomic.Bool  // an episode is open: attempts wait for lim
	binding    atomic.Bool  // an attempt waited for lim since the last raise
	stores     atomic.Int64 // attempts stored through this endpoint
	nextSample atomic.Int64 // unix ns of the next history sample

	mu        sync.Mutex
	changed   chan struct{} // closed when the rate changes or the episode ends
	lim       *rate.Limiter
	r         float64   // lim's rate
	peak      float64   // the highest recent estimate, fading
	slowStart bool      // doubling until the first estimate
	lastAt    time.Time // the last throttle counted
	lastN     int64     // stores then
	stepAt    time.Time // the last raise of the rate
	hist      [pacerHistory]sample
	nhist     int // samples in hist, hist[nhist%len] is the next slot
}

type sample struct {
	at time.Time
	n  int64
}

// stored counts a stored attempt that started at now.
func (p *pacer) stored(now time.Time) {
	p.stores.Add(1)
	if ns := now.UnixNano(); ns >= p.nextSample.Load() {
		p.sample(now)
	}
}

func (p *pacer) sample(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now.UnixNano() < p.nextSample.Load() {
		return
	}
	p.hist[p.nhist%pacerHistory] = sample{at: now, n: p.stores.Load()}
	p.nhist++
	p.nextSample.Store(now.Add(pacerSample).UnixNano())
}

// recentRate is the store rate over the last window of history, counting
// at least pacerSample of time (so a first burst does not read as a rate).
// Called with mu held.
func (p *pacer) recentRate(now time.Time, n int64, window time.Duration) float64 {
	oldest := sample{at: now, n: n}
	for i := 0; i < min(p.nhist, pacerHistory); i++ {
		s := p.hist[i]
		if now.Sub(s.at) <= window && s.at.Before(oldest.at) {
			oldest = s
		}
	}
	dt := max(now.Sub(oldest.at), pacerSample)
	return float64(n-oldest.n) / dt.Seconds()
}

// throttled records a throttle without a hint of an attempt that ended at
// now.
func (p *pacer) throttled(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.stores.Load()
	if !p.on.Load() {
		p.r = max(p.recentRate(now, n, time.Second)/2, pacerMinRate)
		p.slowStart = true
		p.lim = rate.NewLimiter(rate.Limit(p.r), burstFor(p.r))
		p.lastAt, p.lastN, p.stepAt = now, n, now
		p.changed = make(chan struct{})
		p.on.Store(true)
		return
	}
	dt := now.Sub(p.lastAt)
	if dt < pacerMinGap {
		// The same overload: every attempt in flight then is refused.
		return
	}
	// Between two throttles the broker stored its capacity, unless its
	// bucket overflowed meanwhile (demand fell short of it for a while):
	// that reads low, so one throttle cuts the rate by half at most, and
	// the rate climbs back fast towards the recent peak.
	if n == p.lastN {
		// Nothing stored between two throttles: the broker refuses
		// everything for a spell (a backlog, a storage load), which no
		// rate would get through. Each refused message waits out its own
		// schedule, and the episode ends: a pace learnt during a spell
		// would only hold back the sends after it.
		p.endLocked()
		return
	}
	est := float64(n-p.lastN) / dt.Seconds()
	p.slowStart = false
	p.lastAt, p.lastN = now, n
	p.peak = max(p.peak*pacerPeakDecay, est)
	p.setRate(now, max(pacerMargin*est, p.r/2))
}

func (p *pacer) setRate(now time.Time, r float64) {
	p.stepAt = now
	p.limitLocked(now, max(r, pacerMinRate), true)
}

// limitLocked sets the rate to r. With anew, the turns handed out so far
// are void: the limiter starts again at r, and the attempts waiting for a
// turn wake and take new ones (the old limiter's reservations are dropped,
// not cancelled: cancelled out of order, they would lose tokens). Called
// with mu held.
func (p *pacer) limitLocked(now time.Time, r float64, anew bool) {
	p.r = r
	if !anew {
		p.lim.SetLimitAt(now, rate.Limit(r))
		p.lim.SetBurstAt(now, burstFor(r))
		return
	}
	p.lim = rate.NewLimiter(rate.Limit(r), burstFor(r))
	close(p.changed)
	p.changed = make(chan struct{})
}

// endLocked ends the episode, and lets the attempts waiting go. Called
// with mu held.
func (p *pacer) endLocked() {
	p.on.Store(false)
	p.lim = nil
	close(p.changed)
	p.changed = nil
}

// burstFor is the limiter's burst at rate r: 2 ms of it, at least 1.
func burstFor(r float64) int {
	return max(1, int(r/500))
}

// wait makes an attempt that is about to start wait its turn while an
// episode is open: false when the wait would end at or after ctx's deadline
// (nothing is waited then) or ctx ended during it. When the rate is set
// anew during the wait (a throttle's estimate, a doubling), the turn is
// taken again at the new rate: turns handed out at a rate that was just cut
// would all go to a broker that has just refused, and turns handed out at a
// slow start's first rate (one a second) would hold the sends for as many
// seconds as there are sends waiting, long after the rate has grown.
func (p *pacer) wait(ctx context.Context) (ok bool, deadline bool) {
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
		r := p.lim.ReserveN(now, 1)
		changed := p.changed
		p.mu.Unlock()
		d := r.DelayFrom(now)
		if d <= 0 {
			return true, false
		}
		p.binding.Store(true)
		if dl, ok := ctx.Deadline(); ok && !now.Add(d).Before(dl) {
			r.CancelAt(now)
			return false, true
		}
		t := newTimer(d)
		select {
		case <-t.C:
			return true, false
		case <-ctx.Done():
			t.Stop()
			r.Cancel()
			return false, false
		case <-changed:
			t.Stop() // the turn is void: take a new one
		}
	}
	return true, false
}

// hinted records a throttle with the broker's hint: a broker that says when
// to come back is followed, not paced, so an episode ends.
func (p *pacer) hinted() {
	if !p.on.Load() {
		return
	}
	p.mu.Lock()
	if p.on.Load() {
		p.endLocked()
	}
	p.mu.Unlock()
}

// stepLocked raises the rate as time passes in an episode, and ends the
// episode after pacerQuiet without a throttle.
func (p *pacer) stepLocked(now time.Time) {
	if now.Sub(p.lastAt) > pacerQuiet {
		p.endLocked()
		return
	}
	step, factor := pacerProbe, pacerRaise
	switch {
	case p.slowStart, now.Sub(p.lastAt) > pacerStall:
		step, factor = pacerSlowStep, 2
	case p.r < pacerFar*p.peak:
		factor = pacerRecover
	}
	if now.Sub(p.stepAt) < step {
		return
	}
	// One raise per step, and only for a step in which an attempt had to
	// wait: a rate that holds nobody back is not raised, and a pause (all
	// senders waiting out their own schedules) is not made up for with a
	// run of raises.
	p.stepAt = now
	if !p.binding.Swap(false) {
		return
	}
	// A doubling voids the turns handed out (slow start's first rate is
	// one a second); a probe's small step keeps them.
	p.limitLocked(now, p.r*factor, factor == 2)
}

// rateNow is the episode's rate, 0 when none is open (for tests and
// events).
func (p *pacer) rateNow() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on.Load() {
		return 0
	}
	return p.r
}
