package pace

import "time"

// This file holds which refusals are let pass as lone (lone), what a cut
// does (cutLocked), and the rules of a cut from a guess (guessed, slowOver)
// and from a plateau refused twice (flat); pacer.go decides when a refusal
// cuts, and from what rate.

// Guessed: three cuts are guesses, not measures of what got through over a
// plateau: the first in a scope's first second (pacerFirst of a store rate
// that counts the broker's first burst), slow start's end (the rate before
// its last raise, which a small bucket let pass for a step), and slow
// start's second cut (slowOverLocked: what was stored over a few
// milliseconds). After any, wmax is marked a guess (guess: after an idle
// gap, a refusal far past a guessed wmax is cut from halfway, past a
// measured one from wmax), and the probe's time scale is pacerProbeFast
// for that cut, instead of pacerProbe:
// the capacity is anywhere up to the rate refused, and a probe of a second
// held the rate under it for one to two seconds (4 senders against a bucket
// of 200, left at half its capacity by the first second's rule, took 1.5 s
// to find it; against a bucket of 10, slow start left the rate at 1,615-
// 1,816/s for a second). The next cut measures, and sets the probe's time
// scale as usual (cutLocked puts it back to pacerProbe at least). After
// slow start, only while pacerMany or more attempts wait: the senders left
// after the first instant (those refused then sleep out their second) are
// often one to three, and a refusal puts one of them to sleep; against a
// bucket of 10, a fast probe refused at 0.6-0.7 s left none sending until
// the others came back (95.3-97.3% of capacity over 20 s in 6 runs, median
// 95.7%; the code before, paired, 94.0-98.4%, median 97.0%).
//
// Flat: with fewer than pacerMany attempts waiting, a refusal on wmax's
// plateau (the rate back at wmax, not past it), when the cut before was
// one too, within a second of each cut, says wmax is over the capacity:
// the cut is from pacerFlatCut of wmax at most.
// Within a second of a cut, a refusal at wmax is cut from the store rate of
// the last second up to wmax, which counts a bucket's savings; with few
// senders, a wmax a few percent over a bucket of 200 (2,080/s against
// 2,000/s) was refused on its plateau four times in 750 ms, each time
// putting a quarter of the senders to sleep: 1,062-1,316 stored a second
// for a second (shapes_test.go's simulation, 2 runs of 12). With many
// waiting, a refusal costs one sender of many its second, lone refusals
// are let pass and the capacity is searched by halves; the rule there held
// a small bucket under its capacity after stalls (the simulation's bucket
// of 10 behind a stalling server, the lowest of 12 runs after 2 s: 96.3%
// against 97.0% without it).

// lone reports whether a refusal is not the rate's: the first in
// pacerQuiet attempts, or one of the same stall as that one (an attempt
// that started before it was answered, or within pacerStep after); and
// counts it. Called with mu held.
func (p *Pacer) lone(start, now time.Time) bool {
	if start.Before(p.quietAt.Add(pacerStep)) && p.quietN < pacerMany {
		// The same stall's: the requests it held reach the broker
		// together, and a few are refused together, then one or two
		// more while its bucket, emptied, fills again.
		p.quietN++
		return true
	}
	a := p.attempts.Load()
	if p.quietA != 0 && a-p.quietA < pacerQuiet {
		return false
	}
	p.quietA, p.quietAt, p.quietN = a, now, 1
	// The peak counts again from now: senders who left are not many.
	p.peakWait.Store(p.waiting.Load())
	return true
}

// cutLocked cuts the rate to pacerBeta of w, the rate that was getting
// through, and voids the turns handed out: turns handed out at the rate
// that was just refused would all go to a broker that has just refused.
// Called with mu held.
func (p *Pacer) cutLocked(now time.Time, w float64, n int64, flight time.Duration) {
	p.wmax = max(w, pacerMinRate)
	p.held = 0
	p.peakWait.Store(p.waiting.Load()) // the senders since the cut
	// A refusal that came after a long time in flight was queued by the
	// broker first (RocketMQ refuses what waited over 200 ms in its send
	// queue, [TIMEOUT_CLEAN_QUEUE]): at pacerBeta of the rate, its queue
	// drains in about flight/(1-pacerBeta). Until then the rate stays at
	// the cut, and its refusals are the same overload. A refusal that
	// came at once (a token bucket's) leaves nothing queued.
	p.drain = 0
	if flight > pacerQueued {
		p.drain = time.Duration(float64(flight) / (1 - pacerBeta))
	}
	p.cutAt, p.cutN, p.cutA, p.cutIdle, p.refused, p.slow = now, n, p.attempts.Load(), p.idle.Load(), 0, false
	p.low, p.topSet, p.slowEnd, p.guess, p.flat = 0, false, false, false, false
	p.probe = max(p.probe, pacerProbe) // a guess's fast probe is for its own cut
	p.gapNs.Store(max(int64(pacerIdleGap), int64(4*float64(time.Second)/p.wmax)))
	p.stepAt, p.climb, p.climbAt = now, 0, now
	p.r = max(pacerBeta*p.wmax, pacerMinRate)
	p.lim = newTurns(now, p.r) // empty: the broker has just refused
	close(p.changed)
	p.changed = make(chan struct{})
}

// quick reports whether a refusal of an attempt that started at start came
// at once (at now), not after waiting in the broker's queue.
func quick(start, now time.Time) bool { return now.Sub(start) <= pacerQueued }

// slowOverLocked cuts again from what the broker stored since slow start's
// cut, dt ago (n stores now), when a refusal of an attempt that left after
// that cut came at once and the broker stored less than the rate since:
// the cut was over the capacity. A token bucket of b refuses only once the
// rate's excess has drained it, so a rate that grows
// fast passes far over its capacity before the first refusal, and a cut
// from the rate before the last raise can be over it still (256 senders
// against a bucket of 50 in the simulation: cut from 1.8 times its
// capacity, refused within 50 ms, every sender asleep for its second). The
// broker, empty then, stores at its capacity since the cut: read from
// pacerSlowOver stores at least, and up to wmax. Not for a broker that
// queues (the cut's refusal came late: drain), whose refusals within the
// drain are the same overload. Once per slow start. Called with mu held.
func (p *Pacer) slowOverLocked(start, now time.Time, n int64, dt time.Duration) {
	if !p.slowEnd || p.drain > 0 || !quick(start, now) || start.Before(p.cutAt.Add(pacerStep)) || n-p.cutN < pacerSlowOver {
		return
	}
	w := min(float64(n-p.cutN)/dt.Seconds(), p.wmax)
	if w >= pacerSlowUnder*p.r {
		return // the broker stored what it was sent: a refusal of its own
	}
	many := p.peakWait.Load() >= pacerMany
	p.cutLocked(now, w, n, now.Sub(start))
	p.guessedLocked(many)
}

// guessedLocked marks the cut just made a guess (see guessed), with the
// fast probe when fast. Called with mu held, after cutLocked.
func (p *Pacer) guessedLocked(fast bool) {
	p.guess = true
	if fast {
		p.probe = pacerProbeFast
	}
}
