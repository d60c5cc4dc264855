package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// RateStep is a change of the hintless server's capacity: from At after
// the schedule's start on, its token bucket fills at Rate messages per
// second (the burst stays).
type RateStep struct {
	At   time.Duration
	Rate float64
}

// ParseSteps parses a capacity schedule, "AT:RATE[,AT:RATE...]" such as
// "10s:500,20s:3000" (from 10 s on 500/s, from 20 s on 3000/s). The times
// are Go durations > 0 in increasing order and the rates are > 0. "" is
// no schedule. Its errors name the flag --steps.
func ParseSteps(s string) ([]RateStep, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []RateStep
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		at, r, ok := strings.Cut(f, ":")
		if !ok {
			return nil, fmt.Errorf("--steps %q: step %q: want AT:RATE, such as 10s:500", s, f)
		}
		d, err := time.ParseDuration(strings.TrimSpace(at))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("--steps %q: step %q: time %q is not a duration > 0", s, f, at)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("--steps %q: step %q: rate %q is not a number > 0", s, f, r)
		}
		if n := len(out); n > 0 && d <= out[n-1].At {
			return nil, fmt.Errorf("--steps %q: step %q: times must increase (%v is not after %v)", s, f, d, out[n-1].At)
		}
		out = append(out, RateStep{At: d, Rate: v})
	}
	return out, nil
}

// FormatSteps is the text ParseSteps reads back as steps.
func FormatSteps(steps []RateStep) string {
	parts := make([]string, len(steps))
	for i, st := range steps {
		parts[i] = st.At.String() + ":" + strconv.FormatFloat(st.Rate, 'g', -1, 64)
	}
	return strings.Join(parts, ",")
}

// Capacity is the messages a bucket filling at rate0, then at each step's
// rate from its time on, admits from a to b after the schedule's start:
// the integral of the rate over [a, b) (the burst the bucket starts with
// is not counted).
func Capacity(rate0 float64, steps []RateStep, a, b time.Duration) float64 {
	if b <= a {
		return 0
	}
	total := 0.0
	from, r := time.Duration(math.MinInt64), rate0
	for i := 0; i <= len(steps); i++ {
		to := time.Duration(math.MaxInt64)
		if i < len(steps) {
			to = steps[i].At
		}
		if lo, hi := max(a, from), min(b, to); hi > lo {
			total += r * (hi - lo).Seconds()
		}
		if i < len(steps) {
			from, r = steps[i].At, steps[i].Rate
		}
	}
	return total
}

// Jain is Jain's fairness index of x: (sum x)^2 / (n * sum x^2), 1 when
// every x is equal and 1/n when one has everything. It is 1 when every x
// is 0 (equal), 0 when x is empty.
func Jain(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	var sum, sq float64
	for _, v := range x {
		sum += v
		sq += v * v
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(x)) * sq)
}

// fleetBins are the producers' stored sends per bin since the fleet's
// start: per[p][i] is producer p's sends that were stored and returned in
// [i*bin, (i+1)*bin).
type fleetBins struct {
	bin time.Duration
	per [][]int64
}

// edge is the bin edge nearest to t.
func (b fleetBins) edge(t time.Duration) int {
	return int((t + b.bin/2) / b.bin)
}

// span is [from, to) rounded to bin edges, as times.
func (b fleetBins) span(from, to time.Duration) (time.Duration, time.Duration) {
	return time.Duration(b.edge(from)) * b.bin, time.Duration(b.edge(to)) * b.bin
}

// stored is producer p's stores in [from, to) rounded to bin edges; p < 0
// is every producer's.
func (b fleetBins) stored(p int, from, to time.Duration) int64 {
	i, j := b.edge(from), b.edge(to)
	var n int64
	for q, bins := range b.per {
		if p >= 0 && q != p {
			continue
		}
		for k := max(i, 0); k < min(j, len(bins)); k++ {
			n += bins[k]
		}
	}
	return n
}

// Windows of the fleet's figures, after the start of a producer or a step.
const (
	// fairAfter: Jain's index counts from this long after the last
	// producer started to the end.
	fairAfter = 5 * time.Second
	// newcomerFrom, newcomerTo: a newcomer's share is its stores in
	// [its start + newcomerFrom, its start + newcomerTo).
	newcomerFrom = 4 * time.Second
	newcomerTo   = 5 * time.Second
	// reachShare: a newcomer reaches its share once one second of its
	// stores, ending by its start + newcomerTo, is this much of a fair
	// share or more (the 0.8 within 5 s).
	reachShare = 0.8
	// stepSettle: a phase's share of capacity counts from this long after
	// its step.
	stepSettle = time.Second
)

// fairness is Jain's index over the producers' stores in [the last start
// + fairAfter, duration), and that window's start; false when the window
// is under one bin.
func (b fleetBins) fairness(starts []time.Duration, duration time.Duration) (float64, time.Duration, bool) {
	from := fairAfter
	for _, s := range starts {
		from = max(from, s+fairAfter)
	}
	if b.edge(duration) <= b.edge(from) {
		return 0, from, false
	}
	x := make([]float64, len(b.per))
	for p := range b.per {
		x[p] = float64(b.stored(p, from, duration))
	}
	return Jain(x), from, true
}

// newcomerShares are the shares of the producers that started after the
// fleet's start (starts[p] > 0), by producer: a producer's stores in
// [start + newcomerFrom, start + newcomerTo) over the mean stores, in the
// same window, of every producer started by the window's start (itself
// included), so that 1 is its fair share. Producers whose window ends
// after duration, or in whose window nobody stored, have no share.
func (b fleetBins) newcomerShares(starts []time.Duration, duration time.Duration) map[int]float64 {
	shares := map[int]float64{}
	for p, s := range starts {
		from, to := s+newcomerFrom, s+newcomerTo
		if s <= 0 || to > duration {
			continue
		}
		if x, ok := b.share(p, starts, from, to); ok {
			shares[p] = x
		}
	}
	return shares
}

// worstNewcomer is the lowest of newcomerShares and the median of them
// (of an even count, the lower of the middle two);
// false when no producer has one.
func (b fleetBins) worstNewcomer(starts []time.Duration, duration time.Duration) (producer int, share, median float64, ok bool) {
	shares := b.newcomerShares(starts, duration)
	v := make([]float64, 0, len(shares))
	for p, x := range shares {
		v = append(v, x)
		if !ok || x < share || x == share && p < producer {
			producer, share, ok = p, x, true
		}
	}
	return producer, share, quantile(v, 0.5), ok
}

// share is producer p's stores in [from, to) over the mean stores, in
// the same window, of every producer started by from (p included); false
// when nobody stored.
func (b fleetBins) share(p int, starts []time.Duration, from, to time.Duration) (float64, bool) {
	var sum float64
	var n int
	for q, sq := range starts {
		if sq <= from {
			sum += float64(b.stored(q, from, to))
			n++
		}
	}
	if sum == 0 {
		return 0, false
	}
	return float64(b.stored(p, from, to)) / (sum / float64(n)), true
}

// newcomerReach tells, of the producers started after the fleet's start
// whose start + newcomerTo is by duration, how many reached reachShare
// of a fair share in one second ending by then (read every bin, rounded
// to bin edges, from a second after the start), and how long the slowest took
// (to the end of its second).
func (b fleetBins) newcomerReach(starts []time.Duration, duration time.Duration) (reached, of int, slowest time.Duration) {
	for p, s := range starts {
		if s <= 0 || s+newcomerTo > duration {
			continue
		}
		of++
		for e := s + time.Second; e <= s+newcomerTo; e += b.bin {
			if x, ok := b.share(p, starts, e-time.Second, e); ok && x >= reachShare {
				reached++
				slowest = max(slowest, e-s)
				break
			}
		}
	}
	return reached, of, slowest
}

// secondShares are every producer's shares of a fair share (its stores
// over the mean of every producer's) in each whole second of [from, to)
// in which anybody stored: how much one producer's second moves, against
// which a newcomer's second is read.
func (b fleetBins) secondShares(from, to time.Duration) []float64 {
	var v []float64
	for s := from; s+time.Second <= to; s += time.Second {
		mean := float64(b.stored(-1, s, s+time.Second)) / float64(len(b.per))
		if mean == 0 {
			continue
		}
		for p := range b.per {
			v = append(v, float64(b.stored(p, s, s+time.Second))/mean)
		}
	}
	return v
}

// rateSchedule applies a capacity schedule to the server's token bucket:
// each step's rate from its time after zero on. It is applied lazily, by
// the first request at or after a step's time, with SetLimitAt at the
// step's exact time, so the bucket's fill is the schedule's integral
// however the requests fall. Safe for concurrent use.
type rateSchedule struct {
	steps  []RateStep
	nextAt atomic.Int64 // UnixNano of the next step to apply; MaxInt64 after the last
	mu     sync.Mutex
	zero   time.Time
	next   int // the next step to apply
}

func newRateSchedule(steps []RateStep, zero time.Time) *rateSchedule {
	s := &rateSchedule{steps: steps}
	s.setZero(zero)
	return s
}

// setZero moves the schedule's start to zero, unless a step has already
// been applied.
func (s *rateSchedule) setZero(zero time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next > 0 {
		return
	}
	s.zero = zero
	s.nextAt.Store(s.stepTime(0))
}

// stepTime is when step i starts, in UnixNano (MaxInt64: no such step).
// Called with mu held.
func (s *rateSchedule) stepTime(i int) int64 {
	if i >= len(s.steps) {
		return math.MaxInt64
	}
	return s.zero.Add(s.steps[i].At).UnixNano()
}

// apply sets lim's rate to the schedule's at now: every step whose time
// has come, at its time.
func (s *rateSchedule) apply(lim *rate.Limiter, now time.Time) {
	if now.UnixNano() < s.nextAt.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.next < len(s.steps) && now.UnixNano() >= s.stepTime(s.next) {
		lim.SetLimitAt(time.Unix(0, s.stepTime(s.next)), rate.Limit(s.steps[s.next].Rate))
		s.next++
	}
	s.nextAt.Store(s.stepTime(s.next))
}
