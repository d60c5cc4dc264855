package bench

import (
	"context"
	"fmt"
	"io"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// ShapeHotCold measures a throttled topic beside an open one, in one
// producer: does the open topic keep its throughput when another topic of
// the same producer is throttled? Half of the senders (one more when
// Senders is odd) send to topic "cold", which the server stores
// always, for the whole run; the other half send to topic "hot", which the
// server throttles with a token bucket of Rate and Burst (refusals 530
// SEND_RATE, no RetryInfo), in the middle phase only. After a warmup
// (warmup), three phases of Duration each:
//
//  1. alone, before: the cold senders alone;
//  2. beside: the cold senders and the hot ones;
//  3. alone, after: the cold senders alone again, from when every hot
//     send has returned (the hot sends still in flight when the beside
//     phase ends are cancelled: "cut", not failed).
//
// The headline is cold's stored throughput beside hot over its throughput
// alone, the two alone phases pooled (their stores over their seconds):
// alone before and after, so that a drift of the machine over the run
// (a slower or faster second half) weighs on both sides of the ratio
// alike instead of on the beside phase alone. Every figure is counted at
// the server, between "stats" answers taken at the phases' edges.

// HotColdResult is one run of ShapeHotCold.
type HotColdResult struct {
	// AloneBefore, Beside and AloneAfter are cold's stored messages per
	// second in the three phases; Alone is the two alone phases pooled
	// (ColdStoredAlone / AloneSeconds), and Ratio is Beside / Alone.
	AloneBefore float64 `json:"cold_alone_before_per_s"`
	Beside      float64 `json:"cold_beside_per_s"`
	AloneAfter  float64 `json:"cold_alone_after_per_s"`
	Alone       float64 `json:"cold_alone_per_s"`
	Ratio       float64 `json:"ratio"`
	// The counts and seconds the rates come from.
	ColdStoredBefore int64   `json:"cold_stored_before"`
	ColdStoredBeside int64   `json:"cold_stored_beside"`
	ColdStoredAfter  int64   `json:"cold_stored_after"`
	BeforeSeconds    float64 `json:"before_seconds"`
	BesideSeconds    float64 `json:"beside_seconds"`
	AfterSeconds     float64 `json:"after_seconds"`
	// DrainSeconds is from the end of the beside phase until every hot
	// send had returned, the alone-after phase's start.
	DrainSeconds float64 `json:"drain_seconds"`
	// HotStoredBeside is hot's stored messages in the beside phase;
	// HotPerSecond is that per second, and HotShare that over Rate (the
	// bucket starts full, so it can reach 1 + Burst / (Rate * Duration)).
	HotStoredBeside int64   `json:"hot_stored_beside"`
	HotPerSecond    float64 `json:"hot_per_s"`
	HotShare        float64 `json:"hot_share"`
	// HotAttempts, HotStored and HotRefused are counted at the server over
	// the whole run; HotAttemptsPerStored is HotAttempts / HotStored.
	HotAttempts          int64   `json:"hot_attempts"`
	HotStored            int64   `json:"hot_stored"`
	HotRefused           int64   `json:"hot_refused"`
	HotAttemptsPerStored float64 `json:"hot_attempts_per_stored"`
	// ColdRefused is the refusals of cold's calls (0: nothing throttles
	// it).
	ColdRefused int64 `json:"cold_refused"`
	// Counted by the senders: sends made, sends that returned an error,
	// and (hot) sends cut by the end of the beside phase.
	ColdSent   int64 `json:"cold_sent"`
	ColdFailed int64 `json:"cold_failed"`
	HotSent    int64 `json:"hot_sent"`
	HotFailed  int64 `json:"hot_failed"`
	HotCut     int64 `json:"hot_cut"`
	// Latency of cold's sends started in the alone phases and in the
	// beside phase, milliseconds.
	ColdP99AloneMs  float64 `json:"cold_p99_alone_ms"`
	ColdP99BesideMs float64 `json:"cold_p99_beside_ms"`
}

func (r *HotColdResult) line(contender string) string {
	return fmt.Sprintf("%s: cold %.0f/s alone (%.0f before, %.0f after), %.0f/s beside hot: %.3f; hot %.1f%% of its rate, %.2f attempts/stored, %d failed, %d cut; cold %d failed, p99 %.1f ms alone, %.1f ms beside",
		contender, r.Alone, r.AloneBefore, r.AloneAfter, r.Beside, r.Ratio, 100*r.HotShare, r.HotAttemptsPerStored,
		r.HotFailed, r.HotCut, r.ColdFailed, r.ColdP99AloneMs, r.ColdP99BesideMs)
}

// warmup is how long ShapeHotCold's cold senders send before the first
// phase: a tenth of Duration, left out (connections, the first buffers).
func (h Hintless) warmup() time.Duration { return h.Duration / 10 }

// The phases of ShapeHotCold, as a send started in them is counted.
const (
	hcWarmup = iota
	hcBefore
	hcBeside
	hcDrain // the hot sends are cut; counted in no phase
	hcAfter
	hcDone
)

// hotColdEdges are the server's counters at the edges of the phases and
// when they were read: the start of the alone-before phase, its end (the
// beside phase's start), the beside phase's end, the alone-after phase's
// start (every hot send returned) and its end.
type hotColdEdges struct {
	stats [5]ServerStats
	at    [5]time.Time
}

// figures are the rates and ratios of e; before and after are the
// counters at the start and the end of the whole run, rate the bucket's.
func (e *hotColdEdges) figures(before, after ServerStats, rate float64) *HotColdResult {
	cold := func(i int) int64 { return e.stats[i].Stored - e.stats[i].HotStored }
	secs := func(i, j int) float64 { return e.at[j].Sub(e.at[i]).Seconds() }
	r := &HotColdResult{
		ColdStoredBefore: cold(1) - cold(0), ColdStoredBeside: cold(2) - cold(1), ColdStoredAfter: cold(4) - cold(3),
		BeforeSeconds: secs(0, 1), BesideSeconds: secs(1, 2), DrainSeconds: secs(2, 3), AfterSeconds: secs(3, 4),
		HotStoredBeside: e.stats[2].HotStored - e.stats[1].HotStored,
		HotAttempts:     after.HotRequests - before.HotRequests,
		HotStored:       after.HotStored - before.HotStored,
		HotRefused:      after.HotRefused - before.HotRefused,
	}
	r.ColdRefused = (after.Refused - before.Refused) - r.HotRefused
	per := func(n int64, s float64) float64 {
		if s <= 0 {
			return 0
		}
		return float64(n) / s
	}
	r.AloneBefore, r.Beside, r.AloneAfter = per(r.ColdStoredBefore, r.BeforeSeconds), per(r.ColdStoredBeside, r.BesideSeconds), per(r.ColdStoredAfter, r.AfterSeconds)
	r.Alone = per(r.ColdStoredBefore+r.ColdStoredAfter, r.BeforeSeconds+r.AfterSeconds)
	if r.Alone > 0 {
		r.Ratio = r.Beside / r.Alone
	}
	r.HotPerSecond = per(r.HotStoredBeside, r.BesideSeconds)
	r.HotShare = r.HotPerSecond / rate
	if r.HotStored > 0 {
		r.HotAttemptsPerStored = float64(r.HotAttempts) / float64(r.HotStored)
	}
	return r
}

// runHotCold runs ShapeHotCold's phases with sender (see ShapeHotCold
// above): the cold senders for the whole run, the hot ones in the beside
// phase.
func (h Hintless) runHotCold(ctx context.Context, name string, sender Sender, srv *serverProcess, before ServerStats) (*HintlessResult, error) {
	body := make([]byte, h.BodyBytes)
	ids := NewIDs(name)
	hot, cold := withTopic(sender, hotTopic), withTopic(sender, coldTopic)
	nHot := h.Senders / 2
	nCold := h.Senders - nHot

	var phase atomic.Int32
	var coldSent, coldFailed, hotSent, hotFailed, hotCut atomic.Int64
	// Latencies go to histograms made up front, not to growing slices: the
	// client is bound by its garbage collector here, whose pace follows the
	// live heap, so slices growing over the run made each phase faster than
	// the one before (5% over 16 s of cold alone).
	alone := make([]latHist, nCold) // per cold sender
	beside := make([]latHist, nCold)
	coldCtx, stopCold := context.WithCancel(ctx)
	hotCtx, stopHot := context.WithCancel(ctx)
	var coldWG, hotWG sync.WaitGroup
	defer func() { // on an early return as at the end
		stopHot()
		stopCold()
		hotWG.Wait()
		coldWG.Wait()
	}()

	// The cold senders stop starting sends when the run ends (coldCtx),
	// but their sends in flight run on ctx: only hot's are cut.
	start := time.Now()
	for i := range nCold {
		coldWG.Go(func() {
			for coldCtx.Err() == nil {
				ph := phase.Load()
				sctx, cancel := context.WithTimeout(ctx, h.SendTimeout)
				t0 := time.Now()
				err := cold.Send(sctx, ids.Next(), body)
				switch ph {
				case hcBefore, hcAfter:
					alone[i].add(time.Since(t0))
				case hcBeside:
					beside[i].add(time.Since(t0))
				}
				cancel()
				coldSent.Add(1)
				if err != nil {
					coldFailed.Add(1)
				}
			}
		})
	}

	var e hotColdEdges
	var err error
	edge := func(i int) {
		if err != nil {
			return
		}
		t0 := time.Now()
		e.stats[i], err = srv.stats()
		e.at[i] = t0.Add(time.Since(t0) / 2)
	}
	waitUntil(ctx, start.Add(h.warmup()))
	edge(0)
	phase.Store(hcBefore)
	waitUntil(ctx, e.at[0].Add(h.Duration))
	edge(1)
	phase.Store(hcBeside)
	for range nHot {
		hotWG.Go(func() {
			for hotCtx.Err() == nil {
				sctx, cancel := context.WithTimeout(hotCtx, h.SendTimeout)
				err := hot.Send(sctx, ids.Next(), body)
				cancel()
				hotSent.Add(1)
				switch {
				case err == nil:
				case hotCtx.Err() != nil:
					hotCut.Add(1)
				default:
					hotFailed.Add(1)
				}
			}
		})
	}
	waitUntil(ctx, e.at[1].Add(h.Duration))
	edge(2)
	phase.Store(hcDrain)
	stopHot()
	hotWG.Wait()
	edge(3)
	phase.Store(hcAfter)
	waitUntil(ctx, e.at[3].Add(h.Duration))
	edge(4)
	phase.Store(hcDone)
	stopCold()
	coldWG.Wait()
	if cerr := ctx.Err(); cerr != nil {
		return nil, cerr
	}
	if err != nil {
		return nil, err
	}
	after, err := srv.stats()
	if err != nil {
		return nil, err
	}

	hc := e.figures(before, after, h.Rate)
	hc.ColdSent, hc.ColdFailed = coldSent.Load(), coldFailed.Load()
	hc.HotSent, hc.HotFailed, hc.HotCut = hotSent.Load(), hotFailed.Load(), hotCut.Load()
	var lAlone, lBeside, all latHist
	for i := range nCold {
		lAlone.merge(&alone[i])
		lBeside.merge(&beside[i])
	}
	all.merge(&lAlone)
	all.merge(&lBeside)
	hc.ColdP99AloneMs, hc.ColdP99BesideMs = lAlone.quantileMs(0.99), lBeside.quantileMs(0.99)

	res := &HintlessResult{Contender: name, WindowSeconds: e.at[4].Sub(start).Seconds(), HotCold: hc,
		Sent: hc.ColdSent + hc.HotSent, Failed: hc.ColdFailed + hc.HotFailed}
	res.Attempts = after.Requests - before.Requests
	res.Stored = after.Stored - before.Stored
	res.Refused = after.Refused - before.Refused
	if res.Stored > 0 {
		res.AttemptsPerStored = float64(res.Attempts) / float64(res.Stored)
	}
	res.P50ms, res.P99ms = all.quantileMs(0.50), all.quantileMs(0.99)
	return res, nil
}

// latHist is a histogram of latencies of a fixed size: below 64 ns one
// bucket a nanosecond, above 32 buckets a power of two (at most 3% wide),
// up to 2^38 ns (4.6 min; longer ones are counted there).
type latHist [latBuckets]uint32

const latBuckets = 32*32 + 64

func (l *latHist) add(d time.Duration) {
	v := uint64(max(d, 0))
	i := int(v)
	if v >= 64 {
		shift := bits.Len64(v) - 6 // v>>shift is in [32, 63]
		i = shift*32 + int(v>>shift)
	}
	l[min(i, latBuckets-1)]++
}

func (l *latHist) merge(o *latHist) {
	for i, n := range o {
		l[i] += n
	}
}

// quantileMs is the p-quantile in milliseconds, the middle of its bucket
// (0 when empty).
func (l *latHist) quantileMs(p float64) float64 {
	var total uint64
	for _, n := range l {
		total += uint64(n)
	}
	if total == 0 {
		return 0
	}
	rank := uint64(p * float64(total-1)) // as percentileMs: the sample at p of the way
	var seen uint64
	for i, n := range l {
		seen += uint64(n)
		if seen > rank {
			lo, width := uint64(i), uint64(1)
			if i >= 64 {
				shift := i/32 - 1
				lo, width = uint64(i%32+32)<<shift, uint64(1)<<shift
			}
			return (float64(lo) + float64(width-1)/2) / float64(time.Millisecond)
		}
	}
	return 0
}

// HotColdSummary is ShapeHotCold's figures over a contender's rounds.
type HotColdSummary struct {
	AloneBefore          Spread `json:"cold_alone_before_per_s"`
	Beside               Spread `json:"cold_beside_per_s"`
	AloneAfter           Spread `json:"cold_alone_after_per_s"`
	Alone                Spread `json:"cold_alone_per_s"`
	Ratio                Spread `json:"ratio"`
	HotShare             Spread `json:"hot_share"`
	HotAttemptsPerStored Spread `json:"hot_attempts_per_stored"`
	ColdFailed           Spread `json:"cold_failed"`
	HotFailed            Spread `json:"hot_failed"`
	ColdP99AloneMs       Spread `json:"cold_p99_alone_ms"`
	ColdP99BesideMs      Spread `json:"cold_p99_beside_ms"`
}

// summarizeHotCold is the HotColdSummary of rs, or nil when they are not
// ShapeHotCold's.
func summarizeHotCold(rs []*HintlessResult) *HotColdSummary {
	if rs[0].HotCold == nil {
		return nil
	}
	of := func(f func(*HotColdResult) float64) Spread {
		return spreadOf(rs, func(r *HintlessResult) float64 { return f(r.HotCold) })
	}
	return &HotColdSummary{
		AloneBefore:          of(func(r *HotColdResult) float64 { return r.AloneBefore }),
		Beside:               of(func(r *HotColdResult) float64 { return r.Beside }),
		AloneAfter:           of(func(r *HotColdResult) float64 { return r.AloneAfter }),
		Alone:                of(func(r *HotColdResult) float64 { return r.Alone }),
		Ratio:                of(func(r *HotColdResult) float64 { return r.Ratio }),
		HotShare:             of(func(r *HotColdResult) float64 { return r.HotShare }),
		HotAttemptsPerStored: of(func(r *HotColdResult) float64 { return r.HotAttemptsPerStored }),
		ColdFailed:           of(func(r *HotColdResult) float64 { return float64(r.ColdFailed) }),
		HotFailed:            of(func(r *HotColdResult) float64 { return float64(r.HotFailed) }),
		ColdP99AloneMs:       of(func(r *HotColdResult) float64 { return r.ColdP99AloneMs }),
		ColdP99BesideMs:      of(func(r *HotColdResult) float64 { return r.ColdP99BesideMs }),
	}
}

// writeHotColdMarkdown writes ShapeHotCold's settings line and table.
func (rep *HintlessReport) writeHotColdMarkdown(w io.Writer) {
	s := rep.Settings
	nHot := s.Senders / 2
	fmt.Fprintf(w, "shape %s: one producer per contender, %d senders to topic %q (stored always) and %d to topic %q "+
		"(a token bucket of %g msg/s, burst %d, refusing 530 SEND_RATE without RetryInfo), against a server in its own process; "+
		"after %gs of warmup, three phases of %gs: cold alone, cold beside hot, cold alone again (from when every hot send returned); "+
		"beside/alone is cold's stored msg/s beside hot over the two alone phases pooled; %d attempts per send; %s%s\n\n",
		s.Shape, s.Senders-nHot, coldTopic, nHot, hotTopic, s.Rate, s.Burst, s.WarmupSeconds, s.DurationSeconds,
		s.MaxAttempts, hogWords(s.Hog), rounds(s.Rounds))
	fmt.Fprintln(w, "| contender | cold alone before msg/s | cold beside hot msg/s | cold alone after msg/s | **beside/alone** | hot stored/rate | hot attempts/stored | hot failed | cold failed | cold p99 ms alone | cold p99 ms beside |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	one := func(v float64) float64 { return v }
	pct := func(v float64) float64 { return 100 * v }
	for _, r := range rep.Summary {
		hc := r.HotCold
		if hc == nil {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | **%s** | %s | %s | %s | %s | %s | %s |\n", r.Contender,
			hc.AloneBefore.format("%.0f", "", one), hc.Beside.format("%.0f", "", one), hc.AloneAfter.format("%.0f", "", one),
			hc.Ratio.format("%.3f", "", one), hc.HotShare.format("%.1f", "%", pct), hc.HotAttemptsPerStored.format("%.2f", "", one),
			hc.HotFailed.format("%.0f", "", one), hc.ColdFailed.format("%.0f", "", one),
			hc.ColdP99AloneMs.format("%.1f", "", one), hc.ColdP99BesideMs.format("%.1f", "", one))
	}
}

// hogWords says that a hog ran, for the settings lines.
func hogWords(hog bool) string {
	if hog {
		return "one more process spins a CPU core; "
	}
	return ""
}
