package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/producer"
)

// HintlessContenders lists the contenders of the hintless mode, in the
// order of the first round. Their settings differ from the scenario's:
// every one is allowed MaxAttempts attempts on its own unscaled schedule
// (see NewHintlessSender).
var HintlessContenders = []string{Rocketry, Middleware, ServiceConfig, Raw}

// Hintless is throttling without hints: Senders concurrent senders call a
// contender's synchronous send as fast as they can for Duration against a
// server in its own process that stores at most Rate messages per second
// (a token bucket with a burst of Burst) and answers every other call
// RESOURCE_EXHAUSTED with the ErrorDetail 530 SEND_RATE and no
// google.rpc.RetryInfo (see ServeHintless). Each run starts a fresh server.
type Hintless struct {
	// Duration is how long senders start new sends.
	Duration time.Duration
	// Senders is the number of concurrent senders, one send at a time each.
	Senders int
	// Rate and Burst are the server's token bucket: its capacity, in
	// messages per second, and how many it takes at once after a pause.
	Rate  float64
	Burst int
	// MaxAttempts is every retrying contender's attempts per send, the
	// first counted.
	MaxAttempts int
	// SendTimeout bounds each send, retries included; it is long enough
	// not to cut any contender's MaxAttempts attempts short.
	SendTimeout time.Duration
	// BodyBytes is the size of every body.
	BodyBytes int
	// Server is the command that runs ServeHintless in a child process,
	// reading its stdin and writing its stdout; Run appends --listen
	// 127.0.0.1:0 --rate R --burst B. ServerEnv is added to the child's
	// environment.
	Server    []string
	ServerEnv []string
	// Shape is the server's throttling, one of Shapes ("": ShapeBucket).
	// ShapeHot and ShapeOneInTen run Sends sends and time them instead of
	// running for Duration (see runCount); ShapeHotCold runs three phases
	// of Duration each (see runHotCold).
	Shape string
	// Sends is the sends of ShapeHot and ShapeOneInTen.
	Sends int
	// Settle is when a run's settled figure (SettledRatio) starts, after
	// the first send: the first instant's refusals are behind by then (a
	// sender refused then sleeps out 1 s), and the rate that meets the
	// senders coming back is what the contender made of it. 0: none.
	Settle time.Duration
	// Hog runs one more child process, HogCommand with HogEnv added to
	// its environment, that spins a CPU core for each run (see Fleet's).
	Hog        bool
	HogCommand []string
	HogEnv     []string
}

// DefaultHintless returns the hintless mode's defaults, without Server.
func DefaultHintless() Hintless {
	return Hintless{
		Duration:    20 * time.Second,
		Senders:     64,
		Rate:        2000,
		Burst:       200,
		MaxAttempts: 5,
		SendTimeout: 30 * time.Second,
		BodyBytes:   100,
		Settle:      2 * time.Second,
	}
}

// Validate names the first field that is out of range.
func (h Hintless) Validate() error {
	switch {
	case h.Duration <= 0:
		return errors.New("bench: Duration must be > 0")
	case h.Senders < 1:
		return errors.New("bench: Senders must be >= 1")
	case !(h.Rate > 0):
		return errors.New("bench: Rate must be > 0")
	case h.Burst < 1:
		return errors.New("bench: Burst must be >= 1")
	case h.MaxAttempts < 1 || h.MaxAttempts > 5:
		return errors.New("bench: MaxAttempts must be in [1, 5] (grpc-go's retry allows at most 5)")
	case h.SendTimeout <= 0:
		return errors.New("bench: SendTimeout must be > 0")
	case h.Settle < 0:
		return errors.New("bench: Settle must be >= 0")
	case h.BodyBytes < 0:
		return errors.New("bench: BodyBytes must be >= 0")
	case len(h.Server) == 0:
		return errors.New("bench: Server must name the server command")
	case h.Shape != "" && !slices.Contains(Shapes, h.Shape):
		return fmt.Errorf("bench: Shape %q: want one of %q", h.Shape, Shapes)
	case h.counted() && h.Sends < 1:
		return errors.New("bench: Sends must be >= 1")
	case h.Shape == ShapeHotCold && h.Senders < 2:
		return errors.New("bench: Senders must be >= 2 with shape " + ShapeHotCold + " (half to each topic)")
	case h.Hog && len(h.HogCommand) == 0:
		return errors.New("bench: HogCommand must name the hog's command")
	}
	return nil
}

// NewHintlessSender builds contender name of the hintless mode on addr,
// each allowed attempts attempts (the first counted) on its own default
// schedule, unscaled:
//
//   - rocketry: producer.New(addr, producer.WithProtocol(producer.RocketryV1), producer.WithMaxAttempts(attempts)),
//     nothing else (so its throttle schedule is the gRPC connection
//     backoff: 1 s, x1.6, +/-20% from the second wait on);
//     rocketry-nopacing the same with WithPacing(false), rocketry-async
//     the same producer sending with SendAsync (RocketryAsync);
//   - middleware: go-grpc-middleware's retry on RESOURCE_EXHAUSTED and
//     UNAVAILABLE, WithMax(attempts) (it counts attempts),
//     BackoffExponentialWithJitter(100 ms, 0.2): 100, 200, 400, 800 ms;
//   - serviceconfig: a retryPolicy of maxAttempts attempts, 0.1 s initial,
//     x2, 1 s max, on RESOURCE_EXHAUSTED and UNAVAILABLE;
//   - raw: the generated client, no retry (the reference).
func NewHintlessSender(name, addr string, attempts int) (Sender, error) {
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	switch name {
	case Raw:
	case Rocketry, RocketryNoPacing, RocketryAsync:
		p, err := producer.New(addr, producer.WithProtocol(producer.RocketryV1), producer.WithMaxAttempts(attempts), producer.WithPacing(name != RocketryNoPacing))
		if err != nil {
			return nil, err
		}
		r := rocketrySender{p: p, topic: scenarioTopic}
		if name == RocketryAsync {
			return &asyncSender{r}, nil
		}
		return &r, nil
	case Middleware:
		dial = append(dial, grpc.WithUnaryInterceptor(retry.UnaryClientInterceptor(
			retry.WithCodes(codes.ResourceExhausted, codes.Unavailable),
			retry.WithMax(uint(attempts)),
			retry.WithBackoff(retry.BackoffExponentialWithJitter(100*time.Millisecond, 0.2)),
		)))
	case ServiceConfig:
		dial = append(dial, grpc.WithDefaultServiceConfig(HintlessServiceConfig(attempts)))
	default:
		return nil, fmt.Errorf("bench: unknown contender %q for the hintless mode (known: %q)", name, append(HintlessContenders, RocketryNoPacing, RocketryAsync))
	}
	cc, err := grpc.NewClient(addr, dial...)
	if err != nil {
		return nil, err
	}
	return &rawSender{cc: cc, client: rocketryv1.NewMessagingServiceClient(cc), topic: scenarioTopic}, nil
}

// HintlessServiceConfig is grpc-go's retry policy of the hintless mode.
func HintlessServiceConfig(attempts int) string {
	return `{"methodConfig":[{"name":[{"service":"rocketry.v1.MessagingService"}],` +
		`"retryPolicy":{"maxAttempts":` + strconv.Itoa(attempts) + `,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,` +
		`"retryableStatusCodes":["RESOURCE_EXHAUSTED","UNAVAILABLE"]}}]}`
}

// HintlessResult is one contender's run of the hintless mode.
type HintlessResult struct {
	Contender string `json:"contender"`
	// Round counts from 1.
	Round int `json:"round"`
	// WindowSeconds is from the first send to the end of Duration.
	WindowSeconds float64 `json:"window_seconds"`
	// StoredPerSecond is the messages the server accepted in the window,
	// per second; CapacityRatio is that over Rate. The bucket starts full,
	// so it can exceed 1 by Burst / (Rate * window) (0.5% by default).
	StoredPerSecond float64 `json:"stored_per_s"`
	CapacityRatio   float64 `json:"capacity_ratio"`
	// SettledRatio is CapacityRatio from Settle after the first send to
	// the end of Duration: without the first instant, in which every
	// sender in flight when the bucket first runs dry is refused and
	// sleeps out its first second whatever a pacer does (0 unless
	// Duration is over twice Settle). SettleSeconds is Settle.
	SettledRatio  float64 `json:"settled_ratio,omitempty"`
	SettleSeconds float64 `json:"settle_seconds,omitempty"`
	// Attempts, Stored and Refused are counted at the server over the
	// whole run, the sends still in flight at the end of Duration included;
	// AttemptsPerStored is Attempts / Stored.
	Attempts          int64   `json:"attempts"`
	Stored            int64   `json:"stored"`
	Refused           int64   `json:"refused"`
	AttemptsPerStored float64 `json:"attempts_per_stored"`
	// Sent and Failed are counted by the senders: sends made, and sends
	// that returned an error.
	Sent   int64 `json:"sent"`
	Failed int64 `json:"failed"`
	// Latency of one send, retries included, milliseconds.
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
	// Counted shapes (ShapeHot, ShapeOneInTen): the time until every send
	// ended (ShapeHot: every send to topic "cold"), and the sends of that
	// topic that failed.
	Seconds     float64 `json:"seconds,omitempty"`
	TimedFailed int64   `json:"timed_failed,omitempty"`
	// HotCold is ShapeHotCold's figures (then P50ms and P99ms are the
	// sends to topic "cold" in the three phases).
	HotCold *HotColdResult `json:"hot_cold,omitempty"`
}

func (r *HintlessResult) String() string {
	if r.HotCold != nil {
		return r.HotCold.line(r.Contender)
	}
	if r.Seconds > 0 {
		return fmt.Sprintf("%s: %.3f s, %d failed of the timed sends, %.2f attempts/stored, %d of %d sends failed, p50 %.1f ms, p99 %.1f ms",
			r.Contender, r.Seconds, r.TimedFailed, r.AttemptsPerStored, r.Failed, r.Sent, r.P50ms, r.P99ms)
	}
	settled := ""
	if r.SettledRatio > 0 {
		settled = fmt.Sprintf("; %.1f%% after %gs", 100*r.SettledRatio, r.SettleSeconds)
	}
	return fmt.Sprintf("%s: stored %.0f/s (%.1f%% of capacity%s), %.2f attempts/stored, %d of %d sends failed, p50 %.1f ms, p99 %.1f ms",
		r.Contender, r.StoredPerSecond, 100*r.CapacityRatio, settled, r.AttemptsPerStored, r.Failed, r.Sent, r.P50ms, r.P99ms)
}

// Run runs contender name once against a fresh server process.
func (h Hintless) Run(ctx context.Context, name string) (res *HintlessResult, err error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	if h.Hog {
		hog, err := startChild(h.HogCommand, h.HogEnv)
		if err != nil {
			return nil, fmt.Errorf("bench: the hog: %w", err)
		}
		defer func() {
			if serr := hog.stop(); serr != nil && err == nil {
				res, err = nil, fmt.Errorf("bench: the hog: %w", serr)
			}
		}()
	}
	argv := append(slices.Clone(h.Server), "--listen", "127.0.0.1:0",
		"--rate", strconv.FormatFloat(h.Rate, 'g', -1, 64), "--burst", strconv.Itoa(h.Burst))
	if h.Shape != "" {
		argv = append(argv, "--shape", h.Shape)
	}
	srv, err := startServer(argv, h.ServerEnv)
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := srv.stop(); serr != nil && err == nil {
			res, err = nil, serr
		}
	}()
	sender, err := NewHintlessSender(name, srv.addr, h.MaxAttempts)
	if err != nil {
		return nil, err
	}
	defer sender.Close()

	before, err := srv.stats()
	if err != nil {
		return nil, err
	}
	if h.counted() {
		return h.runCount(ctx, name, sender, srv, before)
	}
	if h.Shape == ShapeHotCold {
		return h.runHotCold(ctx, name, sender, srv, before)
	}
	body := make([]byte, h.BodyBytes)
	ids := NewIDs(name)
	start := time.Now()
	stopAt := start.Add(h.Duration)
	var sent, failed atomic.Int64
	lat := make([][]time.Duration, h.Senders)
	var wg sync.WaitGroup
	for i := range h.Senders {
		wg.Go(func() {
			for time.Now().Before(stopAt) && ctx.Err() == nil {
				sctx, cancel := context.WithTimeout(ctx, h.SendTimeout)
				t0 := time.Now()
				err := sender.Send(sctx, ids.Next(), body)
				lat[i] = append(lat[i], time.Since(t0))
				cancel()
				sent.Add(1)
				if err != nil {
					failed.Add(1)
				}
			}
		})
	}
	var atSettle ServerStats
	settleAt := start.Add(h.Settle)
	settled := h.settles()
	if settled {
		waitUntil(ctx, settleAt)
		if atSettle, err = srv.stats(); err != nil {
			settled = false
		}
		settleAt = time.Now()
	}
	waitUntil(ctx, stopAt)
	atStop, statsErr := srv.stats()
	endAt := time.Now()
	wg.Wait() // the sends in flight finish (bounded by SendTimeout)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if statsErr != nil {
		return nil, statsErr
	}
	after, err := srv.stats()
	if err != nil {
		return nil, err
	}

	res = &HintlessResult{Contender: name, WindowSeconds: endAt.Sub(start).Seconds(), Sent: sent.Load(), Failed: failed.Load()}
	res.StoredPerSecond = float64(atStop.Stored-before.Stored) / res.WindowSeconds
	res.CapacityRatio = res.StoredPerSecond / h.Rate
	if settled {
		res.SettledRatio = float64(atStop.Stored-atSettle.Stored) / endAt.Sub(settleAt).Seconds() / h.Rate
		res.SettleSeconds = h.Settle.Seconds()
	}
	res.Attempts = after.Requests - before.Requests
	res.Stored = after.Stored - before.Stored
	res.Refused = after.Refused - before.Refused
	if res.Stored > 0 {
		res.AttemptsPerStored = float64(res.Attempts) / float64(res.Stored)
	}
	all := slices.Concat(lat...)
	res.P50ms, res.P99ms = percentileMs(all, 0.50), percentileMs(all, 0.99)
	return res, nil
}

// settles reports whether a run has a settled figure: Settle is set, and
// Duration is over twice it.
func (h Hintless) settles() bool {
	return h.Settle > 0 && h.Duration > 2*h.Settle && h.Shape != ShapeHotCold
}

// waitUntil returns at t, or when ctx ends.
func waitUntil(ctx context.Context, t time.Time) {
	tm := time.NewTimer(time.Until(t))
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
	}
}

// Spread is a figure's median over rounds and its range.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

func spreadOf(rs []*HintlessResult, f func(*HintlessResult) float64) Spread {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	s := Spread{Min: v[0], Max: v[len(v)-1], Median: v[len(v)/2]}
	if len(v)%2 == 0 {
		s.Median = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return s
}

// HintlessSummary is one contender's figures over its rounds.
type HintlessSummary struct {
	Contender         string `json:"contender"`
	Rounds            int    `json:"rounds"`
	StoredPerSecond   Spread `json:"stored_per_s"`
	CapacityRatio     Spread `json:"capacity_ratio"`
	SettledRatio      Spread `json:"settled_ratio"`
	AttemptsPerStored Spread `json:"attempts_per_stored"`
	Sent              Spread `json:"sent"`
	Failed            Spread `json:"failed"`
	P50ms             Spread `json:"p50_ms"`
	P99ms             Spread `json:"p99_ms"`
	Seconds           Spread `json:"seconds"`
	TimedFailed       Spread `json:"timed_failed"`
	// HotCold is ShapeHotCold's figures.
	HotCold *HotColdSummary `json:"hot_cold,omitempty"`
}

// SummarizeHintless returns the summary of one contender's runs (at least
// one).
func SummarizeHintless(rs []*HintlessResult) *HintlessSummary {
	return &HintlessSummary{
		HotCold:           summarizeHotCold(rs),
		Contender:         rs[0].Contender,
		Rounds:            len(rs),
		StoredPerSecond:   spreadOf(rs, func(r *HintlessResult) float64 { return r.StoredPerSecond }),
		CapacityRatio:     spreadOf(rs, func(r *HintlessResult) float64 { return r.CapacityRatio }),
		SettledRatio:      spreadOf(rs, func(r *HintlessResult) float64 { return r.SettledRatio }),
		AttemptsPerStored: spreadOf(rs, func(r *HintlessResult) float64 { return r.AttemptsPerStored }),
		Sent:              spreadOf(rs, func(r *HintlessResult) float64 { return float64(r.Sent) }),
		Failed:            spreadOf(rs, func(r *HintlessResult) float64 { return float64(r.Failed) }),
		P50ms:             spreadOf(rs, func(r *HintlessResult) float64 { return r.P50ms }),
		P99ms:             spreadOf(rs, func(r *HintlessResult) float64 { return r.P99ms }),
		Seconds:           spreadOf(rs, func(r *HintlessResult) float64 { return r.Seconds }),
		TimedFailed:       spreadOf(rs, func(r *HintlessResult) float64 { return float64(r.TimedFailed) }),
	}
}

// HintlessReport is a whole run of the hintless mode.
type HintlessReport struct {
	Settings HintlessSettings   `json:"settings"`
	Summary  []*HintlessSummary `json:"summary"`
	// Runs are the single runs, in the order they ran.
	Runs []*HintlessResult `json:"runs"`
}

// HintlessSettings are a Hintless's figures, as reported.
type HintlessSettings struct {
	DurationSeconds    float64 `json:"duration_seconds"`
	Senders            int     `json:"senders"`
	Rate               float64 `json:"rate_per_s"`
	Burst              int     `json:"burst"`
	MaxAttempts        int     `json:"max_attempts"`
	SendTimeoutSeconds float64 `json:"send_timeout_seconds"`
	Rounds             int     `json:"rounds"`
	Shape              string  `json:"shape,omitempty"`
	Sends              int     `json:"sends,omitempty"`
	// SettleSeconds is Settle, when the runs have a settled figure.
	SettleSeconds float64 `json:"settle_seconds,omitempty"`
	// WarmupSeconds is ShapeHotCold's warmup before its first phase.
	WarmupSeconds float64 `json:"warmup_seconds,omitempty"`
	// Hog is Hintless.Hog.
	Hog bool `json:"hog,omitempty"`
}

// RunHintless runs every contender of names once per round, each run
// against a fresh server process, rotating the order every round (A B C D,
// then B C D A, ...), and writes a line per run to progress.
func RunHintless(ctx context.Context, h Hintless, names []string, rounds int, progress io.Writer) (*HintlessReport, error) {
	if rounds < 1 || len(names) == 0 {
		return nil, fmt.Errorf("bench: %d rounds of %d contenders: want at least one of each", rounds, len(names))
	}
	rep := &HintlessReport{Settings: HintlessSettings{
		DurationSeconds: h.Duration.Seconds(), Senders: h.Senders, Rate: h.Rate, Burst: h.Burst,
		MaxAttempts: h.MaxAttempts, SendTimeoutSeconds: h.SendTimeout.Seconds(), Rounds: rounds,
		Shape: h.Shape, Sends: h.Sends, Hog: h.Hog,
	}}
	if h.Shape == ShapeHotCold {
		rep.Settings.WarmupSeconds = h.warmup().Seconds()
	}
	if h.settles() {
		rep.Settings.SettleSeconds = h.Settle.Seconds()
	}
	byName, runs, err := interleave(ctx, names, rounds, progress, h.Run)
	if err != nil {
		return nil, err
	}
	rep.Runs = runs
	for _, name := range names {
		rep.Summary = append(rep.Summary, SummarizeHintless(byName[name]))
	}
	return rep, nil
}

// WriteMarkdown writes the settings line and the table: each figure's
// median over the rounds, with its range when there is more than one.
func (rep *HintlessReport) WriteMarkdown(w io.Writer) {
	s := rep.Settings
	if s.Shape != "" && s.Shape != ShapeBucket {
		rep.writeShapeMarkdown(w)
		return
	}
	fmt.Fprintf(w, "hintless: %d senders for %gs per contender against a server in its own process that stores %g msg/s (burst %d) "+
		"and refuses the rest RESOURCE_EXHAUSTED + ErrorDetail 530 SEND_RATE, no RetryInfo; %d attempts per send; "+
		"%s%s\n\n",
		s.Senders, s.DurationSeconds, s.Rate, s.Burst, s.MaxAttempts, hogWords(s.Hog), rounds(s.Rounds))
	// The column "after Ns" only when the runs have a settled figure.
	afterHead, afterRule := "", ""
	if s.SettleSeconds > 0 {
		afterHead, afterRule = fmt.Sprintf(" after %gs |", s.SettleSeconds), "---:|"
	}
	fmt.Fprintf(w, "| contender | stored msg/s | stored/capacity |%s attempts/stored | sends | failed | p50 ms | p99 ms |\n", afterHead)
	fmt.Fprintf(w, "|---|---:|---:|%s---:|---:|---:|---:|---:|\n", afterRule)
	for _, r := range rep.Summary {
		pct := func(v float64) float64 { return 100 * v }
		one := func(v float64) float64 { return v }
		after := ""
		if s.SettleSeconds > 0 {
			after = " " + r.SettledRatio.format("%.1f", "%", pct) + " |"
		}
		fmt.Fprintf(w, "| %s | %s | %s |%s %s | %s | %s | %s | %s |\n", r.Contender,
			r.StoredPerSecond.format("%.0f", "", one), r.CapacityRatio.format("%.1f", "%", pct), after,
			r.AttemptsPerStored.format("%.2f", "", one), r.Sent.format("%.0f", "", one), r.Failed.format("%.0f", "", one),
			r.P50ms.format("%.1f", "", one), r.P99ms.format("%.1f", "", one))
	}
}

// format prints the median, and "(min-max)" when they differ.
func (s Spread) format(verb, unit string, f func(float64) float64) string {
	med := fmt.Sprintf(verb, f(s.Median)) + unit
	lo, hi := fmt.Sprintf(verb, f(s.Min)), fmt.Sprintf(verb, f(s.Max))
	if lo == hi {
		return med
	}
	return med + " (" + lo + "-" + hi + unit + ")"
}

func rounds(n int) string {
	if n == 1 {
		return "1 round"
	}
	return fmt.Sprintf("median of %d rounds (min-max)", n)
}

// roundResult is a contender's result of one run, which interleave numbers.
type roundResult interface {
	setRound(n int)
	String() string
}

func (r *HintlessResult) setRound(n int) { r.Round = n }

// interleave runs every contender once per round, each round starting
// with the next contender so that none always runs first, and returns the
// results by contender and in the order they ran; it prints one progress
// line per run.
func interleave[R roundResult](ctx context.Context, names []string, rounds int, progress io.Writer, run func(context.Context, string) (R, error)) (map[string][]R, []R, error) {
	byName := map[string][]R{}
	var all []R
	for round := range rounds {
		for i := range names {
			name := names[(i+round)%len(names)]
			r, err := run(ctx, name)
			if err != nil {
				return nil, nil, fmt.Errorf("%s, round %d: %w", name, round+1, err)
			}
			r.setRound(round + 1)
			fmt.Fprintf(progress, "round %d/%d: %s\n", round+1, rounds, r)
			byName[name] = append(byName[name], r)
			all = append(all, r)
		}
	}
	return byName, all, nil
}
