// Command rocketry-bench measures rocketry against other retry strategies
// under throttling (BENCHMARKS.md): go-grpc-middleware's retry, grpc-go's
// own retries, naive loops. It is a program of its own so that these
// contenders stay out of the rocketry binary users install.
//
// Usage:
//
//	go run ./internal/cmd/rocketry-bench [flags]
//
// Run it with -h for the flags.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rocketry-go/rocketry/internal/bench"
	"github.com/rocketry-go/rocketry/internal/cli"
)

// benchReport is what --json prints.
type benchReport struct {
	Machine  benchMachine    `json:"machine"`
	Scenario *benchScenario  `json:"scenario,omitempty"`
	Results  []*bench.Result `json:"results,omitempty"`
	// Runs are the single runs the medians of Results come from (--rounds > 1).
	Runs  []*bench.Result      `json:"runs,omitempty"`
	Scale []*bench.ScaleResult `json:"scale,omitempty"`
	// Hintless is --hintless's report.
	Hintless *bench.HintlessReport `json:"hintless,omitempty"`
	// Fleet is --fleet's report.
	Fleet *bench.FleetReport `json:"fleet,omitempty"`
}

type benchMachine struct {
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"go_version"`
	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
}

// benchScenario is the scenario's settings, as printed.
type benchScenario struct {
	DurationSeconds  float64 `json:"duration_seconds"`
	WarmupSeconds    float64 `json:"warmup_seconds"`
	Senders          int     `json:"senders"`
	SendTimeoutMs    float64 `json:"send_timeout_ms"`
	DrainRate        float64 `json:"drain_rate_per_s"`
	MaxBacklog       int64   `json:"max_backlog"`
	EpisodeAtSeconds float64 `json:"episode_at_seconds"`
	EpisodeReads     int     `json:"episode_reads"`
	EpisodeReadRate  float64 `json:"episode_read_rate_per_s"`
	MaxStorageLoad   float64 `json:"max_storage_load_per_s"`
	Scale            float64 `json:"rocketry_time_scale"`
	MaxAttempts      int     `json:"rocketry_max_attempts"`
	NaiveSleepMs     float64 `json:"naive_sleep_ms"`
	Seed             uint64  `json:"seed"`
	Rounds           int     `json:"rounds"`
}

func runBench(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case hintlessServerArg:
			return runHintlessServer(args[1:], stdout, stderr)
		case fleetProducerArg:
			return runFleetProducer(args[1:], stdout, stderr)
		case hogArg:
			return runHog(args[1:], stdout, stderr)
		}
	}
	fs := flag.NewFlagSet("rocketry-bench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: rocketry-bench [--duration 10s] [--rounds N] [--contenders a,b,...] [--json] [--markdown]
       rocketry-bench --hintless [--duration 20s] [--senders 64] [--rate 2000] [--burst 200] [--rounds N] [--json]
       rocketry-bench --hintless --shape hot|oneinten|queue [--sends 3000] [--senders 32] [--rate R] ...
       rocketry-bench --hintless --shape hot-cold [--duration 5s] [--senders 64] [--rate 500] [--burst 50] [--hog] ...
       rocketry-bench --fleet [--producers 8] [--senders 8] [--apart 0s] [--duration 20s] [--rate 2000] [--burst 200]
                      [--steps 10s:500,20s:3000] [--hog] [--rounds N] [--json]
       rocketry-bench --scale [--scale-sizes 1000,10000,100000] [--json]

Runs the throttling scenario of BENCHMARKS.md against each contender in turn
(a fresh in-process broker each time) and prints one table; with --hintless,
throttling without hints: a server in its own process (this binary, started
as "rocketry-bench `+hintlessServerArg+`") stores --rate messages/s with a
burst of --burst and refuses the rest RESOURCE_EXHAUSTED without RetryInfo,
and every contender (rocketry, middleware, serviceconfig, raw) gets 5
attempts on its own unscaled schedule; --shape picks another shape of
throttling (hot: topic "hot" refused always beside topic "cold"; oneinten:
one message in ten refused once; queue: a send queue refusing requests that
waited over 200 ms; hot-cold: topic "hot" throttled at --rate (500/s
burst 50 by default) beside topic "cold", stored always, in one producer:
cold's throughput alone, beside hot and alone again, --duration (5s by
default) each) with contenders rocketry, rocketry-nopacing and middleware
by default, and --hog spins a CPU core beside; with --fleet, --producers
producer processes (this binary, as "rocketry-bench `+fleetProducerArg+`")
of --senders senders each, started --apart apart, share one such server
whose capacity --steps can change during the run, with contenders
rocketry, rocketry-nopacing and middleware by default, and --hog runs one
more process that spins a CPU core; with --scale, measures goroutines and
memory per queued async send.

flags:
`)
		fs.PrintDefaults()
	}
	def := bench.DefaultScenario()
	hdef := bench.DefaultHintless()
	duration := fs.Duration("duration", def.Duration, "how long each contender sends (the warmup, a tenth of it, is left out of the rates); --hintless: default 20s, no warmup; --shape hot-cold: each phase, default 5s")
	hintless := fs.Bool("hintless", false, "throttling without RetryInfo hints, against a server in its own process (see above)")
	hRate := fs.Float64("rate", hdef.Rate, "--hintless, --fleet: the server's capacity, messages per second (--shape hot-cold: topic hot's, default 500)")
	hBurst := fs.Int("burst", hdef.Burst, "--hintless, --fleet: the server's token-bucket burst, messages (--shape hot-cold: default 50)")
	fdef := bench.DefaultFleet()
	fleet := fs.Bool("fleet", false, "many producer processes on one hintless server in its own process (see above)")
	fProducers := fs.Int("producers", fdef.Producers, "--fleet: producer processes")
	fApart := fs.Duration("apart", fdef.Apart, "--fleet: the delay between the starts of two producers")
	fSteps := fs.String("steps", "", "--fleet: the server's capacity schedule, AT:RATE,... after the fleet's start (e.g. 10s:500,20s:3000: 500 msg/s from 10s, 3000 from 20s)")
	fHog := fs.Bool("hog", false, "--fleet, --hintless: run one more process that spins a CPU core for each run")
	fLatency := fs.Duration("latency", 0, "--fleet: the round trip the server adds to every call (half before it decides, half after)")
	hShape := fs.String("shape", bench.ShapeBucket, "--hintless: the server's throttling, one of "+strings.Join(bench.Shapes, ", "))
	hSends := fs.Int("sends", 3000, "--hintless --shape hot|oneinten: the sends, timed")
	hSettle := fs.Duration("settle", hdef.Settle, "--hintless, --fleet: the settled figure counts from this long after the first send (0: none; only when --duration is over twice it)")
	jsonOut := fs.Bool("json", false, "print JSON")
	markdown := fs.Bool("markdown", true, "print Markdown tables (the default; off when --json is given alone, or with --markdown=false)")
	contenders := fs.String("contenders", strings.Join(bench.ScenarioContenders, ","), "contenders to run, in order; rocketry-nohint (rocketry without the broker's RetryInfo hints) is a diagnostic extra; --hintless: default "+strings.Join(bench.HintlessContenders, ",")+"; --fleet: default "+strings.Join(bench.FleetContenders, ","))
	seed := fs.Uint64("seed", def.Seed, "seed of rocketry's jitter and the broker")
	senders := fs.Int("senders", def.Senders, "concurrent senders (--fleet: per producer, default 8)")
	drainRate := fs.Float64("drain-rate", def.DrainRate, "the consumer's rate, messages per second")
	maxBacklog := fs.Int64("max-backlog", def.MaxBacklog, "the broker's backlog limit")
	archive := fs.Int("archive", def.ArchiveMessages, "messages of the archive topic that the storage-load episode re-reads from offset 0")
	episodeReads := fs.Int("episode-reads", def.EpisodeReads, "messages the episode re-reads (0: no episode)")
	rounds := fs.Int("rounds", 1, "rounds over the contenders, interleaved; the table shows each figure's median")
	scale := fs.Bool("scale", false, "measure memory and goroutines per in-flight async send instead of the scenario")
	scaleSizes := fs.String("scale-sizes", "1000,10000,100000", "queued sends of --scale")
	if code, ok := cli.ParseFlags("rocketry-bench", fs, args, stdout, stderr); !ok {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *jsonOut && !set["markdown"] {
		*markdown = false
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep := &benchReport{Machine: benchMachine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH}}

	if *fleet {
		if *hintless || *scale {
			fmt.Fprintln(stderr, "rocketry-bench: --fleet excludes --hintless and --scale")
			return 2
		}
		if set["shape"] || set["sends"] {
			fmt.Fprintln(stderr, "rocketry-bench: --shape and --sends need --hintless, not --fleet (the fleet's server is a token bucket)")
			return 2
		}
		f := fdef
		if set["duration"] {
			f.Duration = *duration
		}
		if set["senders"] {
			f.Senders = *senders
		}
		f.Producers, f.Apart, f.Rate, f.Burst, f.Settle, f.Hog, f.Latency = *fProducers, *fApart, *hRate, *hBurst, *hSettle, *fHog, *fLatency
		return runFleetMode(ctx, f, *fSteps, *contenders, set["contenders"], *rounds, *seed, rep, *markdown, *jsonOut, stdout, stderr)
	}
	if set["producers"] || set["apart"] || set["steps"] {
		fmt.Fprintln(stderr, "rocketry-bench: --producers, --apart and --steps need --fleet")
		return 2
	}
	if set["hog"] && !*hintless {
		fmt.Fprintln(stderr, "rocketry-bench: --hog needs --fleet or --hintless")
		return 2
	}
	if !*hintless && (set["rate"] || set["burst"] || set["shape"] || set["sends"] || set["settle"]) {
		fmt.Fprintln(stderr, "rocketry-bench: --rate, --burst, --shape, --sends and --settle need --hintless (--rate, --burst and --settle: or --fleet)")
		return 2
	}
	if *hintless {
		if *scale {
			fmt.Fprintln(stderr, "rocketry-bench: --hintless and --scale exclude each other")
			return 2
		}
		h := hdef
		if set["duration"] {
			h.Duration = *duration
		}
		h.Senders, h.Rate, h.Burst, h.Shape, h.Sends, h.Settle = *senders, *hRate, *hBurst, *hShape, *hSends, *hSettle
		if h.Shape != bench.ShapeHot && h.Shape != bench.ShapeOneInTen {
			h.Sends = 0
		} else if !set["senders"] {
			h.Senders = 32
		}
		if h.Shape == bench.ShapeHotCold {
			hotColdDefaults(&h, set)
		}
		argv, env, err := hintlessServerCommand()
		if err != nil {
			fmt.Fprintf(stderr, "rocketry-bench: --hintless: the server command: %v\n", err)
			return 1
		}
		h.Server, h.ServerEnv = argv, env
		if *fHog {
			h.Hog = true
			if h.HogCommand, h.HogEnv, err = benchChildCommand(hogArg); err != nil {
				fmt.Fprintf(stderr, "rocketry-bench: --hintless: the command of %s: %v\n", hogArg, err)
				return 1
			}
			h.HogEnv = append(h.HogEnv, "GOMAXPROCS=1")
		}
		list := strings.Join(bench.HintlessContenders, ",")
		if h.Shape != bench.ShapeBucket {
			list = strings.Join(bench.ShapeContenders, ",")
		}
		if set["contenders"] {
			list = *contenders
		}
		names, err := bench.ParseList(list, append(slices.Clone(bench.HintlessContenders), bench.RocketryNoPacing, bench.RocketryAsync))
		if err != nil {
			fmt.Fprintf(stderr, "rocketry-bench: --contenders: %v\n", err)
			return 2
		}
		if *rounds < 1 {
			fmt.Fprintf(stderr, "rocketry-bench: --rounds %d: want >= 1\n", *rounds)
			return 2
		}
		if err := h.Validate(); err != nil {
			fmt.Fprintf(stderr, "rocketry-bench: %v\n", err)
			return 2
		}
		hr, err := bench.RunHintless(ctx, h, names, *rounds, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "rocketry-bench: --hintless: %v\n", err)
			return 1
		}
		rep.Hintless = hr
		return printBench(rep, *markdown, *jsonOut, stdout, stderr)
	}

	if *scale {
		sizes, err := parseSizes(*scaleSizes)
		if err != nil {
			fmt.Fprintf(stderr, "rocketry-bench: --scale-sizes: %v\n", err)
			return 2
		}
		for _, n := range sizes {
			for _, name := range []string{bench.Raw, bench.Rocketry} {
				r, err := bench.MeasureScale(ctx, name, n)
				if err != nil {
					fmt.Fprintf(stderr, "rocketry-bench: --scale %s at %d: %v\n", name, n, err)
					return 1
				}
				rep.Scale = append(rep.Scale, r)
			}
		}
		return printBench(rep, *markdown, *jsonOut, stdout, stderr)
	}

	names, err := bench.ParseList(*contenders, append(append([]string(nil), bench.ScenarioContenders...), bench.Diagnostic...))
	if err != nil {
		fmt.Fprintf(stderr, "rocketry-bench: --contenders: %v\n", err)
		return 2
	}
	sc := def
	sc.Duration = *duration
	sc.Warmup = *duration / 10
	sc.EpisodeAt = *duration * 4 / 10
	sc.Seed = *seed
	sc.Senders = *senders
	sc.DrainRate = *drainRate
	sc.MaxBacklog = *maxBacklog
	sc.ArchiveMessages = *archive
	sc.EpisodeReads = *episodeReads
	if *rounds < 1 {
		fmt.Fprintf(stderr, "rocketry-bench: --rounds %d: want >= 1\n", *rounds)
		return 2
	}
	if err := sc.Validate(); err != nil {
		fmt.Fprintf(stderr, "rocketry-bench: %v\n", err)
		return 2
	}
	rep.Scenario = &benchScenario{
		DurationSeconds: sc.Duration.Seconds(), WarmupSeconds: sc.Warmup.Seconds(), Senders: sc.Senders,
		SendTimeoutMs: benchMs(sc.SendTimeout), DrainRate: sc.DrainRate, MaxBacklog: sc.MaxBacklog,
		EpisodeAtSeconds: sc.EpisodeAt.Seconds(), EpisodeReads: sc.EpisodeReads, EpisodeReadRate: sc.EpisodeReadRate,
		MaxStorageLoad: sc.MaxStorageLoad, Scale: sc.Scale, MaxAttempts: sc.MaxAttempts, NaiveSleepMs: benchMs(sc.NaiveSleep), Seed: sc.Seed, Rounds: *rounds,
	}
	byName := map[string][]*bench.Result{}
	for round := range *rounds {
		for _, name := range names {
			r, err := sc.Run(ctx, name)
			if err != nil {
				fmt.Fprintf(stderr, "rocketry-bench: %s: %v\n", name, err)
				return 1
			}
			fmt.Fprintf(stderr, "round %d/%d: %s\n", round+1, *rounds, r)
			byName[name] = append(byName[name], r)
			if *rounds > 1 {
				rep.Runs = append(rep.Runs, r)
			}
		}
	}
	for _, name := range names {
		rep.Results = append(rep.Results, bench.Median(byName[name]))
	}
	return printBench(rep, *markdown, *jsonOut, stdout, stderr)
}

// hotColdDefaults sets what --shape hot-cold takes by default where the
// flags (set) did not say: the topic throttled at 500/s with a
// burst of 50, and phases of 5 s.
func hotColdDefaults(h *bench.Hintless, set map[string]bool) {
	if !set["rate"] {
		h.Rate = 500
	}
	if !set["burst"] {
		h.Burst = 50
	}
	if !set["duration"] {
		h.Duration = 5 * time.Second
	}
}

func benchMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a count >= 1", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func printBench(rep *benchReport, markdown, jsonOut bool, stdout, stderr io.Writer) int {
	if markdown {
		writeBenchMarkdown(stdout, rep)
	}
	if jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "rocketry-bench: %v\n", err)
			return 1
		}
	}
	return 0
}

func writeBenchMarkdown(w io.Writer, rep *benchReport) {
	m := rep.Machine
	fmt.Fprintf(w, "machine: %d CPUs, %s %s/%s\n\n", m.CPUs, m.GoVersion, m.GOOS, m.GOARCH)
	if sc := rep.Scenario; sc != nil {
		fmt.Fprintf(w, "scenario: %d senders for %gs each (first %gs left out of the rates), consumer draining %g msg/s, backlog limit %d, "+
			"storage-load episode at %gs (%d cold reads at %g/s, limit %g/s); rocketry: connection backoff x%g, %d attempts; seed %d; median of %d rounds\n\n",
			sc.Senders, sc.DurationSeconds, sc.WarmupSeconds, sc.DrainRate, sc.MaxBacklog,
			sc.EpisodeAtSeconds, sc.EpisodeReads, sc.EpisodeReadRate, sc.MaxStorageLoad, sc.Scale, sc.MaxAttempts, sc.Seed, sc.Rounds)
	}
	if len(rep.Results) > 0 {
		fmt.Fprintln(w, "| contender | goodput msg/s | drained msg/s | goodput/drain rate | drained/drain rate | attempts/stored | refused (backlog+storage) | p50 ms | p99 ms | sent | stored | failed | lost |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, r := range rep.Results {
			fmt.Fprintf(w, "| %s | %.0f | %.0f | %.1f%% | %.1f%% | %.2f | %d (%d+%d) | %.1f | %.1f | %d | %d | %d | %d |\n",
				r.Contender, r.Goodput, r.Drained, 100*r.GoodputRatio, 100*r.DrainedRatio, r.Amplification, r.Refused, r.RefusedBacklog, r.RefusedStorage,
				r.P50ms, r.P99ms, r.Sent, r.Stored, r.Failed, r.Lost)
		}
		for _, r := range rep.Results {
			if t := r.Timing; t != nil {
				fmt.Fprintf(w, "\nretry timing (%s): %d retries; actual - scheduled delay: p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms; early: %d\n",
					r.Contender, t.Retries, t.P50ms, t.P90ms, t.P99ms, t.MaxMs, t.Early)
			}
			if t := r.TimerControl; t != nil {
				fmt.Fprintf(w, "plain time.Timer in the same run (control): %d waits; late by p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms\n",
					t.Retries, t.P50ms, t.P90ms, t.P99ms, t.MaxMs)
			}
			for _, e := range r.Errors {
				fmt.Fprintf(w, "\n%s: %s\n", r.Contender, e)
			}
		}
	}
	if rep.Hintless != nil {
		rep.Hintless.WriteMarkdown(w)
	}
	if rep.Fleet != nil {
		rep.Fleet.WriteMarkdown(w)
	}
	if len(rep.Scale) > 0 {
		fmt.Fprintln(w, "| contender | queued sends | goroutines | goroutines/send | heap MiB | heap KiB/send | stacks MiB | stack KiB/send | queued in s |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, r := range rep.Scale {
			fmt.Fprintf(w, "| %s | %d | %d | %.2f | %.1f | %.2f | %.1f | %.2f | %.2f |\n", r.Contender, r.InFlight, r.Goroutines, r.GoroutinesPerSend,
				float64(r.HeapBytes)/(1<<20), r.HeapBytesPerSend/1024, float64(r.StackBytes)/(1<<20), r.StackBytesPerSend/1024, r.QueueSeconds)
		}
	}
}

// hintlessServerArg is the hidden subcommand of bench that runs the server
// of --hintless and --fleet: "rocketry-bench serve-hintless --listen ADDR
// --rate R --burst B [--shape S] [--steps AT:RATE,...]" writes
// "listening ADDR" on stdout, answers "stats" lines read from stdin, takes
// "start UNIXNANO" as the start of the --steps schedule, and exits when
// stdin closes (bench.ServeSteps).
const hintlessServerArg = "serve-hintless"

// hintlessServerCommand returns the command, and the environment to add,
// that --hintless starts its server with: this binary's hidden subcommand.
// Tests replace it, since their binary is not rocketry.
var hintlessServerCommand = func() (argv, env []string, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	return []string{exe, hintlessServerArg}, nil, nil
}

// benchStdin is what the hintless server reads its requests from.
var benchStdin io.Reader = os.Stdin

func runHintlessServer(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("rocketry-bench " + hintlessServerArg)
	def := bench.DefaultHintless()
	listen := fs.String("listen", "127.0.0.1:0", "`address` to listen on")
	perSecond := fs.Float64("rate", def.Rate, "messages per second stored")
	burst := fs.Int("burst", def.Burst, "token-bucket burst, messages")
	shape := fs.String("shape", bench.ShapeBucket, "the throttling, one of "+strings.Join(bench.Shapes, ", "))
	stepsFlag := fs.String("steps", "", "the bucket's capacity schedule, AT:RATE,... after its start or the time of a \"start UNIXNANO\" line")
	latency := fs.Duration("latency", 0, "the round trip every call takes more: half before the server decides, half after")
	if code, ok := cli.ParseFlags("rocketry-bench "+hintlessServerArg, fs, args, stdout, stderr); !ok {
		return code
	}
	steps, err := bench.ParseSteps(*stepsFlag)
	if err != nil {
		fmt.Fprintf(stderr, "rocketry-bench %s: %v\n", hintlessServerArg, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := bench.ServeSteps(ctx, *listen, *shape, *perSecond, *burst, steps, *latency, benchStdin, stdout); err != nil {
		fmt.Fprintf(stderr, "rocketry-bench %s: %v\n", hintlessServerArg, err)
		return 1
	}
	return 0
}

func main() {
	os.Exit(runBench(os.Args[1:], os.Stdout, os.Stderr))
}
