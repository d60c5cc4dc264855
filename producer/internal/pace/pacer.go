package pace

import (
	"sync"
	"sync/atomic"
	"time"
)

// This file holds the pacer: the throttle state of what a broker throttles
// (pace.go says which scope a throttle belongs to).
//
// Without it, each send waits out its own throttle schedule: every sender
// refused in the same instant waits the same unjittered first second, and
// all of them come back together, take the broker's burst and are refused
// together again, a lock near the burst rate (a quarter of a 2,000/s
// broker's capacity, measured). With it, once the refusals say that the
// rate is the problem, the scope's attempts wait their turn at a rate that
// follows what the broker accepts, so that sends queue in the client
// instead of being refused, and are released one by one, never all at
// once.
//
// Engaging. A refusal says the rate is the problem when refusals are a
// sustained share of the scope's attempts: at least pacerEngageOf of its
// last pacerRing attempts, or pacerRun refusals that are half the attempts
// since the first of them (a few senders refused together, stores of the
// bucket's trickle between them); or when it ends a run of pacerLone
// stores (a token bucket's burst drained by a few senders, each refused
// alone: before this rule, 4 senders never engaged the pacer, and each
// slept out its schedule: 15% of capacity). One message in ten refused for
// its own reasons rarely does either (3 of its refusals within 6 attempts,
// or 64 stores in a row, are each about one in a hundred or a thousand),
// and an episode opened by chance ends at its next refusals (below). An
// episode is opened only while the broker is storing something: when it
// refuses everything (a backlog, a spell), no rate gets through, and each
// refused message waits its own schedule.
//
// The rate is AWS SDKs' adaptive retry mode (CUBIC), scaled to the rate:
// each cut is to pacerBeta of wmax, the rate that was getting through (the
// messages stored since the last cut over the time since; on the first cut,
// the store rate of the last second, which in a scope's first second counts
// the broker's first burst, so wmax is pacerFirst of it), never a restart
// from nothing. The rate then climbs back to wmax in pacerRecover along a
// cubic (fast at first, flat near wmax), and from there probes upwards
// along the cubic's convex side, slowly at first (+3.75% after half the
// probe's time scale, pacerProbe), until the next refusal cuts again. While
// the rate that gets through holds from cut to cut, the probe's time scale
// doubles, up to pacerProbeMax, so that refusals come seconds apart. The
// climb's clock runs only while attempts wait for the rate. A token
// bucket's capacity C is measured exactly this way: between two refusals
// its bucket is empty at both ends, so it stored C times the time between
// them (unless nobody sent for a while: then the cut is from halfway
// between the rate refused and its cut, as CUBIC's fast convergence).
// Two exceptions, where the rate was under C for much of the time and a
// small bucket spilled what it could not save: a refusal of the probe
// (past wmax) cuts from wmax at least, and from what got through since
// the rate was back at wmax; a refusal at wmax or under, within a second
// of the cut, from the store rate of the last second up to wmax at least.
// And with many attempts waiting, a probe refused far past wmax says the
// capacity is far over it: the next wmax is halfway between, and the
// capacity is searched by halves (throttled says how).
//
// In an episode, a refusal cuts again when refusals are a sustained share
// of the attempts since the cut (the cut was not deep enough, or the
// capacity fell), or when it comes after a clean run of pacerClean
// attempts since the cut (the rate is over what the broker accepts),
// unless it is lone: while pacerMany attempts or more have waited at once
// since the cut (or the last lone refusal), and the rate is not far past
// wmax, the first refusal in pacerQuiet attempts, and up to pacerMany of
// the same stall, are let pass (a stall on the way lets a few requests
// reach a small bucket together, at any rate near its capacity). A
// refusal alone sooner than pacerClean is a message's own, or the rate's;
// a second one says the refusals go on whatever the rate, and ends the
// episode. An episode in which nobody waited for pacerIdle ends. A
// throttle carrying the broker's own hint (google.rpc.RetryInfo) ends it
// too: each send already waits what the broker said.
//
// Turns are handed out in order at the rate (turns), and keep their times
// when the rate changes, until it has risen by pacerRetake: then they are
// taken again at the new rate.
//
// Only first attempts and retries after a throttle wait their turn: a
// retry after a failure leaves at once, as the contract says.
//
// The pacer costs the fast path one atomic load per attempt, and two
// atomic adds, a compare-and-swap and one more atomic load (flew's check
// of an episode, queue.go) per stored message, while no episode is open.

const (
	pacerRing      = 16                     // the attempts that say whether refusals are sustained
	pacerEngageOf  = 8                      // refusals of pacerRing that engage
	pacerRun       = 3                      // or this many, half the attempts since the first
	pacerLone      = 64                     // or one after a run of this many stores
	pacerShare     = 0.3                    // share of refusals since a cut that cuts again
	pacerClean     = 64                     // attempts since a cut that make a run clean
	pacerBeta      = 0.7                    // a cut: to this share of wmax
	pacerFirst     = 0.5                    // the first cut in a scope's first second
	pacerRecover   = 100 * time.Millisecond // from a cut back to wmax
	pacerProbe     = time.Second            // the convex side's time scale: +30% after it
	pacerProbeFast = 250 * time.Millisecond // the probe's time scale after a guess (slow start's end, a scope's first second)
	pacerProbeMax  = 8 * time.Second        // the probe's time scale, at most, while the capacity holds
	pacerHoldLow   = 0.99                   // a rate that got through in this share of wmax
	pacerHoldHigh  = 1.05                   // to this share holds the capacity
	pacerShallow   = 0.9                    // a cut before any refusal (the broker queues): the rate and turns it starts with, of what it stores
	pacerFar       = 1.25                   // a rate refused this far over what got through: the capacity is between
	pacerMany      = 16                     // attempts waiting their turn that make a refusal cheap
	pacerDouble    = 100 * time.Millisecond // past the cubic, the rate grows this often
	pacerGrow      = 1.25                   // by this factor
	pacerSlowStep  = 25 * time.Millisecond  // in slow start, this often
	pacerSlowGrow  = 1.5                    // by this factor
	pacerTrust     = 128                    // stores an estimate rests on, at least, or slow start
	pacerIdle      = 2 * time.Second        // the episode ends after this with nobody held back (past a first retry)
	pacerStep      = 5 * time.Millisecond   // the limiter follows the cubic this often
	pacerMinGap    = 50 * time.Millisecond  // refusals closer to a cut are the same overload
	pacerSample    = 100 * time.Millisecond // history of stores, one sample per
	pacerHistory   = 10                     // samples kept: a second
	pacerMinRate   = 1.0                    // attempts per second, at least
	pacerIdleGap   = 20 * time.Millisecond  // a longer gap between attempts is idle, at least
	pacerRetake    = 1.1                    // a rate this much above the turns' voids them
	pacerQueued    = 50 * time.Millisecond  // a refusal after longer in flight was queued by the broker
	pacerCeil      = 2.0                    // after a queued refusal, the rate grows to this many times the store rate, at most
	pacerPlateau   = 1.01                   // a rate past this share of wmax is the probe's: wmax got through
	pacerQuiet     = 256                    // attempts since the last lone refusal that make the next one lone
	pacerHalve     = 1.1                    // a probe refused this far past wmax: the capacity is searched by halves
	pacerSlowOver  = 8                      // stores since slow start's cut that a second cut reads, at least
	pacerSlowUnder = 0.95                   // and it cuts when they were under this share of the rate
	pacerFlatCut   = 0.97                   // wmax's plateau refused twice in a row, within a second of each cut: the next wmax is under it, by this share
	pacerHalveEnd  = 1.01                   // until wmax is this close over the plateau that held
)

// Pacer is one scope's throttle state; its zero value has no episode. It
// is safe for concurrent use, and a nil *Pacer paces nothing.
type Pacer struct {
	on         atomic.Bool   // an episode is open: attempts wait for lim
	stores     atomic.Int64  // attempts stored in this scope
	attempts   atomic.Int64  // attempts stored or refused without a hint
	ring       atomic.Uint32 // the last attempts' outcomes, newest in bit 0: 1 refused
	binding    atomic.Bool   // an attempt waited for lim since the last raise
	lastBind   atomic.Int64  // unix ns of the last attempt that waited for lim
	nextSample atomic.Int64  // unix ns of the next history sample
	lastNs     atomic.Int64  // unix ns of the last attempt recorded
	idle       atomic.Int64  // ns without attempts, beyond gapNs at a time
	idleAt     atomic.Int64  // unix ns of the end of the last idle gap
	gapNs      atomic.Int64  // the longest gap between attempts that is not idle
	waiting    atomic.Int32  // attempts waiting for their turn now
	peakWait   atomic.Int32  // the most waiting at once in the episode
	minFlight  atomic.Int64  // ns, the quickest store of the episode; 0: none yet (reset when one opens)
	queuedAt   atomic.Int64  // unix ns of the last store that waited in the broker's queue

	mu       sync.Mutex
	changed  chan struct{} // closed when the turns handed out are void (a cut, the end)
	lim      *turns
	r        float64       // lim's rate
	wmax     float64       // the rate that was getting through at the last cut
	slowEnd  bool          // the last cut ended slow start (slowOverLocked)
	guess    bool          // wmax is a guess, not a measure (see guessed)
	flat     bool          // the last cut was of a refusal on wmax's plateau, within a second of the cut before it, with a few waiting
	held     float64       // while the capacity is searched by halves, a plateau under wmax that held; 0: none
	cutAt    time.Time     // the last cut
	cutN     int64         // stores then
	cutA     int64         // attempts then
	cutIdle  int64         // idle then
	refused  int64         // refusals since the cut
	refusedN int64         // stores at the last refusal
	stepAt   time.Time     // the limiter's last update
	climb    time.Duration // time since the cut that attempts waited for the rate
	climbAt  time.Time     // when climb was last counted
	slow     bool          // slow start: the estimate was weak
	topSet   bool          // the rate is back at wmax since the cut, since:
	topAt    time.Time
	topN     int64         // stores then
	topIdle  int64         // idle then
	drain    time.Duration // from the cut, the time the broker's queue needs to drain
	low      int           // refusals since the cut well under wmax
	quietA   int64         // attempts at the last refusal let pass as lone
	quietAt  time.Time     // and its time
	quietN   int           // refusals of its stall let pass
	probe    time.Duration // the convex side's time scale now
	hist     [pacerHistory]sample
	nhist    int // samples in hist, hist[nhist%len] is the next slot
}

// stored counts a stored attempt that started at now.
func (p *Pacer) stored(now time.Time) {
	if p == nil {
		return
	}
	p.stores.Add(1)
	p.attempts.Add(1)
	p.note(now)
	if p.ring.Load() != 0 {
		p.push(false)
	}
	if ns := now.UnixNano(); ns >= p.nextSample.Load() {
		p.sample(now)
	}
}

// throttled records a refusal without a hint of an attempt that started
// at start and ended at now.
func (p *Pacer) throttled(start, now time.Time) {
	if p == nil {
		return
	}
	p.attempts.Add(1)
	p.note(now)
	ring := p.push(true)
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.stores.Load()
	run := n - p.refusedN
	p.refusedN = n
	if !p.on.Load() {
		if !sustained(ring) && run < pacerLone {
			return // a message's own refusal, as far as anyone can tell
		}
		acc, k := p.recentRate(now, n, time.Second)
		if k == 0 {
			return // nothing stored lately: no rate gets through
		}
		p.changed = make(chan struct{})
		p.on.Store(true)
		p.probe = pacerProbe
		p.minFlight.Store(0) // the episode's own quickest store
		p.lastBind.Store(now.UnixNano())
		p.cutLocked(now, acc, n, now.Sub(start))
		p.slow = k < pacerTrust
		if !p.slow && p.nhist < pacerHistory {
			// The scope's first second: its store rate counts the
			// broker's first burst (a bucket full from the start), so
			// the rate that got through is taken as pacerFirst of it:
			// the rate starts at pacerBeta of that (the cubic's first
			// step), climbs back to it as from a cut, and the probe
			// finds the rest (4 senders at 0.7 of a rate that counted
			// a 200 burst were all refused again; climbing back to
			// that rate, refused at 1.5 times the capacity four times
			// over: 84% of capacity in 10 s).
			p.r = max(pacerFirst*acc, pacerMinRate)
			p.wmax = p.r
			p.lim = newTurns(now, p.r)
			p.guessedLocked(true)
		}
		return
	}
	dt := now.Sub(p.cutAt)
	if start.Before(p.cutAt) || dt < max(pacerMinGap, p.drain) {
		// The same overload: every attempt in flight then is refused,
		// and a broker that refuses has nothing left at the cut;
		// unless slow start's cut was over the capacity (slowOver).
		p.slowOverLocked(start, now, n, dt)
		return
	}
	p.refused++
	if n == p.cutN {
		// Nothing stored since the cut: the broker refuses everything
		// for a spell, which no rate would get through. Each refused
		// message waits out its own schedule.
		p.endLocked()
		return
	}
	busy := max(dt-time.Duration(p.idle.Load()-p.cutIdle), pacerMinGap)
	got := min(float64(n-p.cutN)/busy.Seconds(), p.r)
	idled := p.idleAt.Load() > p.cutAt.UnixNano()
	// far: the rate got far past wmax before any refusal, so wmax was too
	// low, and is no bound on what got through.
	far := p.r > pacerFar*p.wmax
	if idled && !far {
		// The broker's bucket filled while nobody sent, and what it
		// stored since counts that burst: the rate that got through is
		// no more than before.
		got = min(got, p.wmax)
	}
	if p.slow {
		// The rate was growing by pacerSlowGrow: the average since the
		// cut reads low, and the rate before the last raise is what got
		// through, or about (the broker's bucket, filled while the rate
		// was under its capacity, refuses only a step or two late).
		many := p.peakWait.Load() >= pacerMany
		p.cutLocked(now, min(max(got, p.r/pacerSlowGrow), p.r), n, now.Sub(start))
		p.slowEnd = true
		p.guessedLocked(many)
		return
	}
	since := p.attempts.Load() - p.cutA
	quick := quick(start, now)
	switch {
	case (sustained(ring) && !start.Before(p.quietAt.Add(pacerStep))) || (p.refused >= pacerRun && float64(p.refused) >= pacerShare*float64(since)):
		// The cut was not deep enough, or the capacity fell. Soon after
		// the cut, the few stores since tell no rate (one store in the
		// 67 ms after a cut read as 20 a second, and a broker that had
		// stored 1,000 a second, in bursts between its BACKLOG spells,
		// was then paced at 14 a second: 5,000 sends took 124 s instead
		// of 8): what it stored over the last second, up to wmax, is
		// the floor.
		if dt < time.Second {
			acc, _ := p.recentRate(now, n, time.Second)
			got = max(got, min(acc, p.wmax))
		}
		p.probe = pacerProbe
		p.cutLocked(now, got, n, now.Sub(start))
		return
	case since < pacerClean:
		// A refusal alone soon after the cut: a message's own, or the
		// rate's. A second one says the refusals go on whatever the
		// rate (one message in ten refused for its own reasons cut the
		// rate at every refusal, down to 18 a second): they are not
		// about the rate.
		p.low++
		if p.low >= 2 {
			p.endLocked()
		}
		return
	case p.climb < pacerRecover && p.waiting.Load() >= pacerMany && quick:
		// A refusal while the rate is still climbing back to wmax, under
		// what got through: not the rate's (a 5 ms bucket refuses the
		// requests that reach it together, at any rate near its
		// capacity). With many attempts waiting a refusal costs one sender
		// of many its second, and a cut costs all of them the dip: against
		// a 2,000/s bucket with a burst of 10, cutting again at each one
		// kept the rate in its dips, 87-89% of capacity against 92-93%.
		// Not a refusal the broker queued: while stores queue, the climb
		// does not advance, and a queue's refusals are the rate's.
		return
	case !far && p.peakWait.Load() >= pacerMany && quick && p.lone(start, now):
		// A lone refusal, the first in pacerQuiet attempts (with those
		// of the same stall), while many attempts wait their turn and
		// the rate is not far past wmax: not the rate's. A bucket of 10
		// (5 ms of a 2,000/s rate) refuses a few of the requests that a
		// stall on their way (a collection, a descheduled process) lets
		// reach it together, at any rate near its capacity: a cut at
		// each kept the rate in its dips and walked wmax down, 85-90% of
		// capacity in shapes_test.go's simulation of it and against the
		// real server. Under one in pacerQuiet, each refused message waits
		// its second, a cost to one sender of many; a second refusal
		// sooner says the rate is over, and cuts. With a few senders
		// waiting since the cut, or since the last lone refusal (the
		// peak counts again from then: senders leave), a refusal costs
		// a quarter of them their second, and cuts.
		return
	}
	// A refusal after a clean run: the rate is over what the broker
	// accepts. Between two such refusals the broker's bucket was empty at
	// both ends, so what it stored since the cut over the time since is
	// its capacity: the rate that was getting through. (Reading the rate
	// of the last tenth of a second instead, the rate the bucket's
	// savings allowed, set the rate 5% over a 2,000/s bucket, refused
	// every 0.3 s: with 4 senders, each refusal a sender asleep for its
	// second, all four were asleep at times: 90% of capacity.)
	//
	// Unless the bucket overflowed: while the rate was under the capacity
	// (a cut too deep, a scope's first rate), the bucket filled and
	// spilled, and the average since the cut reads low. Then what got
	// through since the rate was back at wmax says more, when it is
	// clearly higher (it counts the cut's savings too, so it is taken
	// only then: taken always, it set the rate 1-2% over a 2,000/s
	// bucket, refused every second).
	//
	// A refusal of the probe (past wmax, which got through) takes what got
	// through since the rate was back at wmax in any case: the probe's
	// rates, not the cut's dip. A refusal at wmax or under, soon after
	// the cut, takes what was stored over the last second, up to wmax,
	// as its floor: the dip alone is no capacity (a bucket of 10 refusing
	// twice in 160 ms, cut from the average since the cut: wmax 1,715/s
	// to 1,497/s).
	// (Not for a refusal the broker queued: a queue does not spill, and
	// what it stored since the cut is what it takes.)
	probe := p.r > pacerPlateau*p.wmax && !idled && quick
	if p.topSet {
		busy := max(now.Sub(p.topAt)-time.Duration(p.idle.Load()-p.topIdle), pacerMinGap)
		top := min(float64(n-p.topN)/busy.Seconds(), p.r)
		if top > pacerHoldHigh*got || probe {
			got = max(got, top)
		}
	}
	if quick && !probe && dt < time.Second {
		acc, _ := p.recentRate(now, n, time.Second)
		got = max(got, min(acc, p.wmax))
	}
	// And when the rate refused is far over what got through, the
	// capacity lies between: with many attempts waiting (a refusal costs
	// one sender of many its second) the cut is from halfway, and the
	// next refusal, soon, is exact; with a few senders (a refusal costs a
	// quarter of them) the probe finds it from below. Not when the broker
	// queued the refused request: a queue answers late, not no, so the
	// rate runs far over its capacity before any refusal (cut from
	// halfway, a 100/s send queue was paced at 145/s, and 1-5 sends of
	// 2,000 ran out of attempts).
	if p.r > pacerFar*got && quick {
		if p.waiting.Load() >= pacerMany {
			got += (p.r - got) / 2
		} else {
			got += (p.r - got) / 4
		}
	}
	// A refusal of the probe says the capacity is between wmax, which got
	// through (lone refusals at most), and the rate refused: the cut is
	// from wmax at least. What got through since the cut reads lower
	// whenever the rate was under the capacity (the dip, a plateau under
	// it: a small bucket spills what it cannot save), and taken alone it
	// walked the rate down cut after cut. A wmax over the capacity is
	// refused on its plateau, more often than lone refusals are let pass,
	// and cut from what got through.
	if probe {
		got = max(got, p.wmax)
	}
	// With many attempts waiting, the capacity between a plateau that
	// held and a rate refused far past it is searched by halves: a probe
	// refused past pacerHalve times wmax sets the next wmax halfway
	// between them, and a refusal on that plateau (the half was over the
	// capacity) halves again, down from the plateau refused to the one
	// that held, until they are within pacerHalveEnd: then the one that
	// held is wmax. A probe of 1 s overshoots a small bucket by only
	// 3-6%, so a rate refused far past wmax says wmax is far under the
	// capacity; what got through since the rate was back at wmax (the
	// probe's climb, mostly under the capacity) raised wmax by a fifth
	// of the gap per probe, the hold rule below slowed the probe while
	// it did, and a bucket of 10 (5 ms of a 2,000/s rate), left by slow
	// start at 1,614-1,840/s, sat under 1,950/s for 10 s: 95.5% of
	// capacity over 20 s, median of 14 runs, against 97.3% by halves.
	// (Halving at every probe refusal, however close to wmax, set wmax
	// over the capacity each time: refused on its plateau, cut from the
	// dip, refused past it again, 97.3% after 2 s in shapes_test.go's
	// bucket of 5, against 99.3%.) Not with a few senders (a refusal
	// costs a quarter of them their second), nor after an idle gap (the
	// bucket's savings, not the rate, got through), nor for a refusal
	// the broker queued.
	held := 0.0
	if quick && !idled && p.peakWait.Load() >= pacerMany {
		switch {
		case probe && p.r > pacerHalve*p.wmax:
			held = p.wmax
			got = max(got, (p.wmax+p.r)/2)
		case !probe && p.held > 0 && p.wmax > pacerHalveEnd*p.held:
			held = p.held
			got = max(got, (p.held+p.wmax)/2)
		case !probe && p.held > 0:
			got = max(got, p.held)
		}
	}
	// When the rate that got through holds, the capacity holds: the next
	// probe is slower (CUBIC's plateau, which grows with the window), so
	// refusals, each a second lost to a sender, come seconds apart. When
	// it moves, the probe is fast again.
	// (After an idle gap the rate read is clamped to wmax below, and
	// counts as holding: the probe slows. Leaving it as it was instead
	// took a bucket of 5 under 97% after the first 2 s in the
	// simulation, in 8 runs of 8 without the recovering-refusal rule
	// above and 1 of 8 with it.)
	// (From pacerProbe at least: a fast probe after a guess is for one
	// cut.)
	if got >= pacerHoldLow*p.wmax && got <= pacerHoldHigh*p.wmax {
		p.probe = min(max(2*p.probe, pacerProbe), pacerProbeMax)
	} else {
		p.probe = pacerProbe
	}
	if idled {
		// Nobody sent for a while since the cut: the broker's bucket
		// filled, and what it stored since counts that burst, so the
		// store rate tells nothing. The refusal came at p.r: as CUBIC
		// does when a loss comes before the window is past wmax, cut
		// from halfway between p.r and its cut (4 senders all refused,
		// back after their second, were refused at the same wmax, too
		// high, every time: 25% of capacity). Not from wmax when the rate
		// got far past it, when wmax was a guess (4 senders held at a
		// first wmax half the capacity for another 1.5 s: 84% of
		// capacity in 10 s); a wmax measured before the gap holds
		// (taken from halfway, 4 senders after their second met a
		// bucket of 200 full, probed 30% past its capacity, were cut
		// from 6% over it and refused three times more: every one of
		// them asleep for 0.25 s).
		got = min(got, (1+pacerBeta)/2*p.r)
		if !far || !p.guess {
			got = min(got, p.wmax)
		}
	}
	flat := quick && !probe && !idled && held == 0 && dt < time.Second && p.r >= pacerHoldLow*p.wmax && p.peakWait.Load() < pacerMany
	if flat && p.flat {
		got = min(got, pacerFlatCut*p.wmax) // see flat
	}
	p.cutLocked(now, got, n, now.Sub(start))
	p.held, p.flat = held, flat
}
