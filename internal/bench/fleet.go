package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FleetContenders lists the contenders of the fleet mode by default.
var FleetContenders = []string{Rocketry, RocketryNoPacing, Middleware}

// Fleet is many producer processes on one hintless server (ServeHintless,
// ShapeBucket): Producers child processes, the i-th started Apart*i after
// the fleet's start, each running Senders concurrent synchronous senders
// of one contender (FleetProducer) until Duration after the fleet's start,
// against a server in a process of its own whose token bucket stores Rate
// messages per second (burst Burst), then each step's rate from its time
// on. Each run starts a fresh server and fresh producers.
type Fleet struct {
	Producers int
	Senders   int
	Apart     time.Duration
	Duration  time.Duration
	Rate      float64
	Burst     int
	// Steps is the capacity schedule, counted from the fleet's start.
	Steps []RateStep
	// Latency is the round trip the server adds to every call.
	Latency     time.Duration
	MaxAttempts int
	SendTimeout time.Duration
	BodyBytes   int
	// Settle is when the settled figure, and the first phase's, start.
	Settle time.Duration
	// Bin is the width of the bins the producers count their stores in.
	Bin time.Duration
	// Hog runs one more child process, HogCommand, that spins a CPU core
	// for the whole of each run.
	Hog bool
	// Server is the command that runs ServeSteps (see Hintless.Server);
	// Run appends --listen 127.0.0.1:0 --rate R --burst B [--steps S].
	Server    []string
	ServerEnv []string
	// Producer is the command that runs ServeFleetProducer; Run appends
	// --addr --contender --senders --delay --duration --attempts
	// --send-timeout --body --bin.
	Producer    []string
	ProducerEnv []string
	// HogCommand spins a core until its stdin ends (it is killed at the
	// end of the run anyway).
	HogCommand []string
	HogEnv     []string
}

// DefaultFleet returns the fleet mode's defaults, without the commands.
func DefaultFleet() Fleet {
	return Fleet{
		Producers:   8,
		Senders:     8,
		Duration:    20 * time.Second,
		Rate:        2000,
		Burst:       200,
		MaxAttempts: 5,
		SendTimeout: 30 * time.Second,
		BodyBytes:   100,
		Settle:      2 * time.Second,
		Bin:         100 * time.Millisecond,
	}
}

// Validate names the first field that is out of range, with its flag.
func (f Fleet) Validate() error {
	switch {
	case f.Producers < 1:
		return errors.New("bench: Producers (--producers) must be >= 1")
	case f.Senders < 1:
		return errors.New("bench: Senders (--senders) must be >= 1")
	case f.Apart < 0:
		return errors.New("bench: Apart (--apart) must be >= 0")
	case f.Latency < 0:
		return errors.New("bench: Latency (--latency) must be >= 0")
	case f.Duration <= 0:
		return errors.New("bench: Duration (--duration) must be > 0")
	case f.Apart*time.Duration(f.Producers-1) >= f.Duration:
		return fmt.Errorf("bench: the last producer starts at %v (--apart x (--producers - 1)), not before --duration %v", f.Apart*time.Duration(f.Producers-1), f.Duration)
	case !(f.Rate > 0):
		return errors.New("bench: Rate (--rate) must be > 0")
	case f.Burst < 1:
		return errors.New("bench: Burst (--burst) must be >= 1")
	case f.MaxAttempts < 1 || f.MaxAttempts > 5:
		return errors.New("bench: MaxAttempts must be in [1, 5] (grpc-go's retry allows at most 5)")
	case f.SendTimeout <= 0:
		return errors.New("bench: SendTimeout must be > 0")
	case f.BodyBytes < 0:
		return errors.New("bench: BodyBytes must be >= 0")
	case f.Settle < 0:
		return errors.New("bench: Settle (--settle) must be >= 0")
	case f.Bin <= 0:
		return errors.New("bench: Bin must be > 0")
	case len(f.Server) == 0 || len(f.Producer) == 0 || (f.Hog && len(f.HogCommand) == 0):
		return errors.New("bench: Server, Producer and (with Hog) HogCommand must name commands")
	}
	for i, st := range f.Steps {
		if st.At <= 0 || !(st.Rate > 0) || (i > 0 && st.At <= f.Steps[i-1].At) {
			return fmt.Errorf("bench: --steps %q: want times > 0 increasing and rates > 0", FormatSteps(f.Steps))
		}
	}
	return nil
}

// start is when producer i starts, after the fleet's start.
func (f Fleet) start(i int) time.Duration { return f.Apart * time.Duration(i) }

// settles reports whether a run has a settled figure: Settle is set, and
// Duration is over twice it.
func (f Fleet) settles() bool { return f.Settle > 0 && f.Duration > 2*f.Settle }

// FleetPhase is a run's share of capacity in one phase of the capacity
// schedule: the first from Settle after the fleet's start, every other
// from 1 s after its step, each to the next step or the end. A phase that
// is over by then has Seconds 0 and no Ratio.
type FleetPhase struct {
	Rate        float64 `json:"rate_per_s"`
	FromSeconds float64 `json:"from_seconds"`
	Seconds     float64 `json:"seconds"`
	Ratio       float64 `json:"capacity_ratio"`
}

// FleetNewcomer is the producer with the lowest share of its fair share
// from 4 s to 5 s after it started, and the median newcomer's share (see
// worstNewcomer); and how many newcomers reached 0.8 of a fair share in
// one second within 5 s of their start, and how long the slowest of them
// took (see newcomerReach).
type FleetNewcomer struct {
	Producer       int     `json:"producer"`
	Share          float64 `json:"share"`
	Median         float64 `json:"median_share"`
	Reached        int     `json:"reached"`
	Of             int     `json:"of"`
	SlowestSeconds float64 `json:"slowest_reach_seconds,omitempty"`
}

// FleetResult is one contender's run of the fleet mode.
type FleetResult struct {
	Contender string `json:"contender"`
	// Round counts from 1.
	Round int `json:"round"`
	// WindowSeconds is from the fleet's start to Duration.
	WindowSeconds float64 `json:"window_seconds"`
	// StoredPerSecond is the sends the producers had back as stored in
	// the window, per second; CapacityRatio is those over the capacity
	// schedule's integral over the window. The bucket starts full, so it
	// can exceed 1 by Burst / capacity.
	StoredPerSecond float64 `json:"stored_per_s"`
	CapacityRatio   float64 `json:"capacity_ratio"`
	// SettledRatio is CapacityRatio from Settle to the end (0 unless
	// Duration is over twice Settle).
	SettledRatio  float64 `json:"settled_ratio,omitempty"`
	SettleSeconds float64 `json:"settle_seconds,omitempty"`
	// Phases are the shares of capacity per phase of the capacity
	// schedule (none without one).
	Phases []FleetPhase `json:"phases,omitempty"`
	// ServerStoredInWindow is the server's count of stores from the start
	// to the end of the window (a check of the producers' bins).
	ServerStoredInWindow int64 `json:"server_stored_in_window"`
	// Attempts, Stored and Refused are counted at the server over the
	// whole run, the sends in flight at the end included;
	// AttemptsPerStored is Attempts / Stored.
	Attempts          int64   `json:"attempts"`
	Stored            int64   `json:"stored"`
	Refused           int64   `json:"refused"`
	AttemptsPerStored float64 `json:"attempts_per_stored"`
	// Sent and Failed are the producers' sends made and failed.
	Sent   int64 `json:"sent"`
	Failed int64 `json:"failed"`
	// P50ms is the median of the producers' p50s; P99ms is the worst
	// producer's p99.
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
	// Jain is Jain's fairness index over the producers' stores from
	// JainFromSeconds (5 s after the last producer started) to the end;
	// 0 when the run ends before.
	Jain            float64 `json:"jain,omitempty"`
	JainFromSeconds float64 `json:"jain_from_seconds,omitempty"`
	// SecondShareP10 is the 10th percentile of every producer's share of
	// a fair share in each second of Jain's window (secondShares): how
	// far one second of a producer falls, newcomer or not.
	SecondShareP10 float64 `json:"second_share_p10,omitempty"`
	// Newcomer is the worst newcomer's share (Apart > 0 only).
	Newcomer *FleetNewcomer `json:"newcomer,omitempty"`
	// Producers are the producers' own reports, without their bins.
	Producers []*FleetProducerResult `json:"producers"`
}

func (r *FleetResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: stored %.0f/s (%.1f%% of capacity", r.Contender, r.StoredPerSecond, 100*r.CapacityRatio)
	if r.SettleSeconds > 0 {
		fmt.Fprintf(&b, "; %.1f%% after %gs", 100*r.SettledRatio, r.SettleSeconds)
	}
	for _, ph := range r.Phases {
		if ph.Seconds > 0 {
			fmt.Fprintf(&b, "; %.1f%% of %g/s from %gs", 100*ph.Ratio, ph.Rate, ph.FromSeconds)
		}
	}
	fmt.Fprintf(&b, "), %.2f attempts/stored, %d of %d sends failed, p50 %.1f ms, p99 %.1f ms (worst producer)",
		r.AttemptsPerStored, r.Failed, r.Sent, r.P50ms, r.P99ms)
	if r.Jain > 0 {
		fmt.Fprintf(&b, ", Jain %.3f from %gs, a producer's second at %.2f of a fair share or more 9 times in 10", r.Jain, r.JainFromSeconds, r.SecondShareP10)
	}
	if r.Newcomer != nil {
		n := r.Newcomer
		fmt.Fprintf(&b, ", worst newcomer %.2f of its fair share (producer %d), median %.2f, %d of %d newcomers at %.1f of it within %gs",
			n.Share, n.Producer, n.Median, n.Reached, n.Of, reachShare, newcomerTo.Seconds())
		if n.Reached > 0 {
			fmt.Fprintf(&b, " (the slowest in %gs)", n.SlowestSeconds)
		}
	}
	return b.String()
}

// figures computes r's window figures from the producers' bins.
func (f Fleet) figures(r *FleetResult, b fleetBins) {
	_, end := b.span(0, f.Duration)
	r.WindowSeconds = end.Seconds()
	if end > 0 {
		r.StoredPerSecond = float64(b.stored(-1, 0, end)) / end.Seconds()
		r.CapacityRatio = ratio(b.stored(-1, 0, end), Capacity(f.Rate, f.Steps, 0, end))
	}
	if f.settles() {
		from, to := b.span(f.Settle, f.Duration)
		r.SettledRatio = ratio(b.stored(-1, from, to), Capacity(f.Rate, f.Steps, from, to))
		r.SettleSeconds = f.Settle.Seconds()
	}
	if len(f.Steps) > 0 {
		for k := 0; k <= len(f.Steps); k++ {
			ph := FleetPhase{Rate: f.Rate}
			from, to := f.Settle, f.Duration
			if k > 0 {
				ph.Rate, from = f.Steps[k-1].Rate, f.Steps[k-1].At+stepSettle
			}
			if k < len(f.Steps) {
				to = min(to, f.Steps[k].At)
			}
			from, to = b.span(from, to)
			ph.FromSeconds = from.Seconds()
			if to > from {
				ph.Seconds = (to - from).Seconds()
				ph.Ratio = ratio(b.stored(-1, from, to), Capacity(f.Rate, f.Steps, from, to))
			}
			r.Phases = append(r.Phases, ph)
		}
	}
	starts := make([]time.Duration, f.Producers)
	for i := range starts {
		starts[i] = f.start(i)
	}
	if j, from, ok := b.fairness(starts, f.Duration); ok {
		r.Jain, r.JainFromSeconds = j, from.Seconds()
		r.SecondShareP10 = quantile(b.secondShares(from, f.Duration), 0.1)
	}
	if p, share, median, ok := b.worstNewcomer(starts, f.Duration); ok {
		r.Newcomer = &FleetNewcomer{Producer: p, Share: share, Median: median}
		reached, of, slowest := b.newcomerReach(starts, f.Duration)
		r.Newcomer.Reached, r.Newcomer.Of, r.Newcomer.SlowestSeconds = reached, of, slowest.Seconds()
	}
}

// ratio is n over capacity, 0 without capacity.
func ratio(n int64, capacity float64) float64 {
	if capacity <= 0 {
		return 0
	}
	return float64(n) / capacity
}

// Run runs contender name once: a fresh server process, the hog if asked,
// and the producer processes. Every child is killed when ctx ends.
func (f Fleet) Run(ctx context.Context, name string) (res *FleetResult, err error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	// children are the processes started, the hog first; when ctx ends
	// they are killed, and at the end stopped (stdin closed, killed after
	// 5 s) in the reverse order.
	var mu sync.Mutex
	var children []*serverProcess
	adopt := func(c *serverProcess) {
		mu.Lock()
		defer mu.Unlock()
		children = append(children, c)
		if ctx.Err() != nil {
			c.kill()
		}
	}
	killAll := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range children {
			c.kill()
		}
	})
	defer func() {
		killAll()
		for _, c := range slices.Backward(children) {
			if serr := c.stop(); serr != nil && err == nil && ctx.Err() == nil {
				res, err = nil, serr
			}
		}
	}()

	if f.Hog {
		hog, err := startChild(f.HogCommand, f.HogEnv)
		if err != nil {
			return nil, fmt.Errorf("bench: the hog: %w", err)
		}
		adopt(hog)
	}
	argv := append(slices.Clone(f.Server), "--listen", "127.0.0.1:0",
		"--rate", strconv.FormatFloat(f.Rate, 'g', -1, 64), "--burst", strconv.Itoa(f.Burst))
	if len(f.Steps) > 0 {
		argv = append(argv, "--steps", FormatSteps(f.Steps))
	}
	if f.Latency > 0 {
		argv = append(argv, "--latency", f.Latency.String())
	}
	srv, err := startServer(argv, f.ServerEnv)
	if err != nil {
		return nil, err
	}
	adopt(srv)
	producers := make([]*serverProcess, f.Producers)
	for i := range producers {
		argv := append(slices.Clone(f.Producer), "--addr", srv.addr, "--contender", name,
			"--senders", strconv.Itoa(f.Senders), "--delay", f.start(i).String(), "--duration", f.Duration.String(),
			"--attempts", strconv.Itoa(f.MaxAttempts), "--send-timeout", f.SendTimeout.String(),
			"--body", strconv.Itoa(f.BodyBytes), "--bin", f.Bin.String())
		p, err := startChild(argv, f.ProducerEnv)
		if err != nil {
			return nil, fmt.Errorf("bench: producer %d: %w", i, err)
		}
		producers[i] = p
		adopt(p)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i, p := range producers {
		line, err := p.readLine(30 * time.Second)
		if strings.TrimSpace(line) != "ready" {
			return nil, fmt.Errorf("bench: producer %d: first line %q, %v; want \"ready\" (stderr %q)", i, line, err, p.stderr.String())
		}
	}

	// The fleet's start, shortly after every producer is ready: the
	// server's capacity schedule and every producer count from it.
	zero := time.Now().Add(200 * time.Millisecond)
	startLine := "start " + strconv.FormatInt(zero.UnixNano(), 10)
	if err := srv.send(startLine); err != nil {
		return nil, err
	}
	before, err := srv.stats() // also: the server has read startLine
	if err != nil {
		return nil, err
	}
	for i, p := range producers {
		if err := p.send(startLine); err != nil {
			return nil, fmt.Errorf("bench: producer %d: %w", i, err)
		}
	}
	waitUntil(ctx, zero.Add(f.Duration))
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	atStop, err := srv.stats()
	if err != nil {
		return nil, err
	}
	res = &FleetResult{Contender: name, ServerStoredInWindow: atStop.Stored - before.Stored}
	b := fleetBins{bin: f.Bin, per: make([][]int64, f.Producers)}
	// Every send in flight finishes within SendTimeout.
	deadline := time.Now().Add(f.SendTimeout + 10*time.Second)
	var p50s []float64
	for i, p := range producers {
		line, err := p.readLine(time.Until(deadline))
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		var pr FleetProducerResult
		if err != nil || json.Unmarshal([]byte(line), &pr) != nil {
			return nil, fmt.Errorf("bench: producer %d: result %q, %v; want a JSON line (stderr %q)", i, line, err, p.stderr.String())
		}
		pr.Producer = i
		b.per[i] = pr.Bins
		pr.Bins, pr.BinMs = nil, 0
		res.Producers = append(res.Producers, &pr)
		res.Sent += pr.Sent
		res.Failed += pr.Failed
		res.P99ms = max(res.P99ms, pr.P99ms)
		p50s = append(p50s, pr.P50ms)
	}
	res.P50ms = spreadValues(p50s).Median
	after, err := srv.stats()
	if err != nil {
		return nil, err
	}
	res.Attempts = after.Requests - before.Requests
	res.Stored = after.Stored - before.Stored
	res.Refused = after.Refused - before.Refused
	if res.Stored > 0 {
		res.AttemptsPerStored = float64(res.Attempts) / float64(res.Stored)
	}
	f.figures(res, b)
	return res, nil
}

// spreadValues is v's median and range (zero without values).
func spreadValues(v []float64) Spread {
	if len(v) == 0 {
		return Spread{}
	}
	v = slices.Clone(v)
	slices.Sort(v)
	s := Spread{Min: v[0], Max: v[len(v)-1], Median: v[len(v)/2]}
	if len(v)%2 == 0 {
		s.Median = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return s
}

// fleetSpread is the spread of f over rs, nil when no run has the figure
// (has false).
func fleetSpread(rs []*FleetResult, f func(*FleetResult) (float64, bool)) *Spread {
	var v []float64
	for _, r := range rs {
		if x, ok := f(r); ok {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return nil
	}
	s := spreadValues(v)
	return &s
}

// FleetSummary is one contender's figures over its rounds; a figure no
// run has is nil.
type FleetSummary struct {
	Contender         string  `json:"contender"`
	Rounds            int     `json:"rounds"`
	StoredPerSecond   *Spread `json:"stored_per_s"`
	CapacityRatio     *Spread `json:"capacity_ratio"`
	SettledRatio      *Spread `json:"settled_ratio,omitempty"`
	AttemptsPerStored *Spread `json:"attempts_per_stored"`
	Sent              *Spread `json:"sent"`
	Failed            *Spread `json:"failed"`
	P50ms             *Spread `json:"p50_ms"`
	P99ms             *Spread `json:"p99_ms"`
	Jain              *Spread `json:"jain,omitempty"`
	SecondShareP10    *Spread `json:"second_share_p10,omitempty"`
	NewcomerShare     *Spread `json:"newcomer_share,omitempty"`
	NewcomerMedian    *Spread `json:"newcomer_median_share,omitempty"`
	NewcomerReached   *Spread `json:"newcomers_reached,omitempty"`
	// Phases are the phases' capacity ratios, in the schedule's order.
	Phases []*Spread `json:"phases,omitempty"`
}

// SummarizeFleet returns the summary of one contender's runs (at least
// one).
func SummarizeFleet(rs []*FleetResult) *FleetSummary {
	all := func(f func(*FleetResult) float64) *Spread {
		return fleetSpread(rs, func(r *FleetResult) (float64, bool) { return f(r), true })
	}
	newcomer := func(f func(*FleetNewcomer) float64) *Spread {
		return fleetSpread(rs, func(r *FleetResult) (float64, bool) {
			if r.Newcomer == nil {
				return 0, false
			}
			return f(r.Newcomer), true
		})
	}
	s := &FleetSummary{
		Contender:         rs[0].Contender,
		Rounds:            len(rs),
		StoredPerSecond:   all(func(r *FleetResult) float64 { return r.StoredPerSecond }),
		CapacityRatio:     all(func(r *FleetResult) float64 { return r.CapacityRatio }),
		SettledRatio:      fleetSpread(rs, func(r *FleetResult) (float64, bool) { return r.SettledRatio, r.SettleSeconds > 0 }),
		AttemptsPerStored: all(func(r *FleetResult) float64 { return r.AttemptsPerStored }),
		Sent:              all(func(r *FleetResult) float64 { return float64(r.Sent) }),
		Failed:            all(func(r *FleetResult) float64 { return float64(r.Failed) }),
		P50ms:             all(func(r *FleetResult) float64 { return r.P50ms }),
		P99ms:             all(func(r *FleetResult) float64 { return r.P99ms }),
		Jain:              fleetSpread(rs, func(r *FleetResult) (float64, bool) { return r.Jain, r.Jain > 0 }),
		SecondShareP10:    fleetSpread(rs, func(r *FleetResult) (float64, bool) { return r.SecondShareP10, r.Jain > 0 }),
		NewcomerShare:     newcomer(func(n *FleetNewcomer) float64 { return n.Share }),
		NewcomerMedian:    newcomer(func(n *FleetNewcomer) float64 { return n.Median }),
		NewcomerReached:   newcomer(func(n *FleetNewcomer) float64 { return float64(n.Reached) }),
	}
	for k := range rs[0].Phases {
		s.Phases = append(s.Phases, fleetSpread(rs, func(r *FleetResult) (float64, bool) {
			if k >= len(r.Phases) || r.Phases[k].Seconds == 0 {
				return 0, false
			}
			return r.Phases[k].Ratio, true
		}))
	}
	return s
}

// FleetReport is a whole run of the fleet mode.
type FleetReport struct {
	Settings FleetSettings   `json:"settings"`
	Summary  []*FleetSummary `json:"summary"`
	// Runs are the single runs, in the order they ran.
	Runs []*FleetResult `json:"runs"`
}

// FleetStep is a RateStep, as reported.
type FleetStep struct {
	AtSeconds float64 `json:"at_seconds"`
	Rate      float64 `json:"rate_per_s"`
}

// FleetSettings are a Fleet's figures, as reported.
type FleetSettings struct {
	Producers          int         `json:"producers"`
	Senders            int         `json:"senders_per_producer"`
	ApartSeconds       float64     `json:"apart_seconds"`
	DurationSeconds    float64     `json:"duration_seconds"`
	Rate               float64     `json:"rate_per_s"`
	Burst              int         `json:"burst"`
	Steps              []FleetStep `json:"steps,omitempty"`
	LatencyMs          float64     `json:"latency_ms,omitempty"`
	MaxAttempts        int         `json:"max_attempts"`
	SendTimeoutSeconds float64     `json:"send_timeout_seconds"`
	BinMs              float64     `json:"bin_ms"`
	Hog                bool        `json:"hog"`
	Rounds             int         `json:"rounds"`
	// SettleSeconds is Settle, when the runs have a settled figure.
	SettleSeconds float64 `json:"settle_seconds,omitempty"`
	// Seed is --seed, recorded; nothing of the fleet is seeded (every
	// contender jitters on its own).
	Seed uint64 `json:"seed"`
}

// RunFleet runs every contender of names once per round, each run with a
// fresh server and fresh producers, rotating the order every round, and
// writes a line per run to progress. seed is recorded only.
func RunFleet(ctx context.Context, f Fleet, names []string, rounds int, seed uint64, progress io.Writer) (*FleetReport, error) {
	if rounds < 1 || len(names) == 0 {
		return nil, fmt.Errorf("bench: %d rounds of %d contenders: want at least one of each", rounds, len(names))
	}
	rep := &FleetReport{Settings: FleetSettings{
		Producers: f.Producers, Senders: f.Senders, ApartSeconds: f.Apart.Seconds(), DurationSeconds: f.Duration.Seconds(),
		Rate: f.Rate, Burst: f.Burst, MaxAttempts: f.MaxAttempts, SendTimeoutSeconds: f.SendTimeout.Seconds(),
		BinMs: float64(f.Bin) / float64(time.Millisecond), Hog: f.Hog, Rounds: rounds, Seed: seed,
		LatencyMs: float64(f.Latency) / float64(time.Millisecond),
	}}
	for _, st := range f.Steps {
		rep.Settings.Steps = append(rep.Settings.Steps, FleetStep{AtSeconds: st.At.Seconds(), Rate: st.Rate})
	}
	if f.settles() {
		rep.Settings.SettleSeconds = f.Settle.Seconds()
	}
	byName, runs, err := interleave(ctx, names, rounds, progress, f.Run)
	if err != nil {
		return nil, err
	}
	rep.Runs = runs
	for _, name := range names {
		rep.Summary = append(rep.Summary, SummarizeFleet(byName[name]))
	}
	return rep, nil
}

func (r *FleetResult) setRound(n int) { r.Round = n }

// WriteMarkdown writes the settings line and the table: each figure's
// median over the rounds, with its range when there is more than one, "-"
// for a figure a contender's runs do not have.
func (rep *FleetReport) WriteMarkdown(w io.Writer) {
	s := rep.Settings
	started := "started together"
	if s.ApartSeconds > 0 {
		started = fmt.Sprintf("started %gs apart", s.ApartSeconds)
	}
	capacity := fmt.Sprintf("%g msg/s", s.Rate)
	for _, st := range s.Steps {
		capacity += fmt.Sprintf(", %g msg/s from %gs", st.Rate, st.AtSeconds)
	}
	hog := ""
	if s.LatencyMs > 0 {
		hog = fmt.Sprintf("every call takes %g ms more (a round trip); ", s.LatencyMs)
	}
	if s.Hog {
		hog += "one more process spins a CPU core; "
	}
	fmt.Fprintf(w, "fleet: %d producer processes x %d senders (%s) for %gs per contender against one server in its own process that stores %s (burst %d) "+
		"and refuses the rest RESOURCE_EXHAUSTED + ErrorDetail 530 SEND_RATE, no RetryInfo; %d attempts per send; %s%s\n\n",
		s.Producers, s.Senders, started, s.DurationSeconds, capacity, s.Burst, s.MaxAttempts, hog, rounds(s.Rounds))

	pct := func(v float64) float64 { return 100 * v }
	one := func(v float64) float64 { return v }
	cell := func(sp *Spread, verb, unit string, f func(float64) float64) string {
		if sp == nil {
			return "-"
		}
		return sp.format(verb, unit, f)
	}
	// The optional columns: settled, phases, Jain, newcomer.
	type column struct {
		head string
		cell func(*FleetSummary) string
	}
	var cols []column
	if s.SettleSeconds > 0 {
		cols = append(cols, column{fmt.Sprintf("after %gs", s.SettleSeconds), func(r *FleetSummary) string { return cell(r.SettledRatio, "%.1f", "%", pct) }})
	}
	if len(rep.Runs) > 0 {
		// Every run has the same phases.
		for k, ph := range rep.Runs[0].Phases {
			cols = append(cols, column{fmt.Sprintf("of %g/s from %gs", ph.Rate, ph.FromSeconds), func(r *FleetSummary) string {
				if k >= len(r.Phases) {
					return "-"
				}
				return cell(r.Phases[k], "%.1f", "%", pct)
			}})
		}
	}
	has := func(f func(*FleetSummary) *Spread) bool {
		return slices.ContainsFunc(rep.Summary, func(r *FleetSummary) bool { return f(r) != nil })
	}
	tail := []column{
		{"attempts/stored", func(r *FleetSummary) string { return cell(r.AttemptsPerStored, "%.2f", "", one) }},
		{"sends", func(r *FleetSummary) string { return cell(r.Sent, "%.0f", "", one) }},
		{"failed", func(r *FleetSummary) string { return cell(r.Failed, "%.0f", "", one) }},
		{"p50 ms", func(r *FleetSummary) string { return cell(r.P50ms, "%.1f", "", one) }},
		{"p99 ms (worst producer)", func(r *FleetSummary) string { return cell(r.P99ms, "%.1f", "", one) }},
	}
	cols = append(cols, tail...)
	if has(func(r *FleetSummary) *Spread { return r.Jain }) {
		var from float64
		for _, r := range rep.Runs {
			from = max(from, r.JainFromSeconds)
		}
		cols = append(cols, column{fmt.Sprintf("Jain from %gs", from), func(r *FleetSummary) string { return cell(r.Jain, "%.3f", "", one) }},
			column{"a producer's second / fair share, 10th pct", func(r *FleetSummary) string { return cell(r.SecondShareP10, "%.2f", "", one) }})
	}
	if has(func(r *FleetSummary) *Spread { return r.NewcomerShare }) {
		cols = append(cols, column{"worst newcomer / fair share", func(r *FleetSummary) string { return cell(r.NewcomerShare, "%.2f", "", one) }},
			column{"median newcomer", func(r *FleetSummary) string { return cell(r.NewcomerMedian, "%.2f", "", one) }})
		of := 0
		for _, r := range rep.Runs {
			if r.Newcomer != nil {
				of = max(of, r.Newcomer.Of)
			}
		}
		cols = append(cols, column{fmt.Sprintf("newcomers at %.1f of it in a second within %gs, of %d", reachShare, newcomerTo.Seconds(), of),
			func(r *FleetSummary) string { return cell(r.NewcomerReached, "%.0f", "", one) }})
	}
	fmt.Fprint(w, "| contender | stored msg/s | stored/capacity |")
	for _, c := range cols {
		fmt.Fprintf(w, " %s |", c.head)
	}
	fmt.Fprint(w, "\n|---|---:|---:|")
	for range cols {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, r := range rep.Summary {
		fmt.Fprintf(w, "| %s | %s | %s |", r.Contender, cell(r.StoredPerSecond, "%.0f", "", one), cell(r.CapacityRatio, "%.1f", "%", pct))
		for _, c := range cols {
			fmt.Fprintf(w, " %s |", c.cell(r))
		}
		fmt.Fprintln(w)
	}
}
