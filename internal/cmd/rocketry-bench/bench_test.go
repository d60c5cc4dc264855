package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rocketry-go/rocketry/internal/bench"
)

// smallBench are flags that make a scenario run take a fraction of a second.
var smallBench = []string{"--duration", "300ms", "--senders", "4", "--drain-rate", "2000", "--max-backlog", "100",
	"--archive", "2000", "--episode-reads", "500"}

func TestBenchJSON(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var out, errb bytes.Buffer
	args := append([]string{"--json", "--contenders", "rocketry,naive-sleep"}, smallBench...)
	if code := runBench(args, &out, &errb); code != 0 {
		t.Fatalf("runBench(%q) = %d; want 0 (stderr %q)", args, code, errb.String())
	}
	var rep benchReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("runBench(%q) printed %q: %v; want JSON", args, out.String(), err)
	}
	if len(rep.Results) != 2 || rep.Results[0].Contender != "rocketry" || rep.Results[1].Contender != "naive-sleep" {
		t.Fatalf("results = %+v; want rocketry then naive-sleep", rep.Results)
	}
	for _, r := range rep.Results {
		if r.Stored == 0 || r.Sent == 0 || r.Attempts < r.Stored {
			t.Errorf("%s: sent %d, stored %d, attempts %d; want stored > 0 and attempts >= stored", r.Contender, r.Sent, r.Stored, r.Attempts)
		}
		if r.Lost != 0 {
			t.Errorf("%s: lost = %d; want 0", r.Contender, r.Lost)
		}
		if r.Sent != r.Stored+r.Failed-r.StoredButFailed {
			t.Errorf("%s: sent %d != stored %d + failed %d - stored-but-failed %d", r.Contender, r.Sent, r.Stored, r.Failed, r.StoredButFailed)
		}
	}
	if rep.Results[0].Timing == nil || rep.Results[0].TimerControl == nil {
		t.Errorf("rocketry: retry_timing = %v, timer_control = %v; want both", rep.Results[0].Timing, rep.Results[0].TimerControl)
	}
	if rep.Scenario == nil || rep.Scenario.Senders != 4 {
		t.Errorf("scenario = %+v; want the flags' settings", rep.Scenario)
	}
}

func TestBenchMarkdown(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var out, errb bytes.Buffer
	args := append([]string{"--contenders", "middleware"}, smallBench...)
	if code := runBench(args, &out, &errb); code != 0 {
		t.Fatalf("runBench(%q) = %d; want 0 (stderr %q)", args, code, errb.String())
	}
	for _, want := range []string{"| contender | goodput msg/s |", "| middleware |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("runBench(%q) printed %q; want it to contain %q", args, out.String(), want)
		}
	}
}

func TestBenchScale(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var out, errb bytes.Buffer
	args := []string{"--scale", "--scale-sizes", "50", "--json"}
	if code := runBench(args, &out, &errb); code != 0 {
		t.Fatalf("runBench(%q) = %d; want 0 (stderr %q)", args, code, errb.String())
	}
	var rep benchReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Scale) != 2 {
		t.Fatalf("scale = %+v; want raw and rocketry at 50", rep.Scale)
	}
	for _, r := range rep.Scale {
		if r.InFlight != 50 || r.Goroutines < 50 {
			t.Errorf("%s: in flight %d, goroutines %d; want 50 and at least one goroutine per held call", r.Contender, r.InFlight, r.Goroutines)
		}
	}
}

func TestBenchBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--contenders", "nope"},
		{"--contenders", ""},
		{"--rounds", "0"},
		{"--scale", "--scale-sizes", "x"},
		{"--duration", "0s"},
		{"--senders", "0"},
		{"extra"},
		{"--rate", "10"},
		{"--hintless", "--scale"},
		{"--hintless", "--contenders", "naive-sleep"},
		{"--hintless", "--burst", "0"},
		{"--hintless", "--duration", "0s"},
		{"--hintless", "--shape", "hot-cold", "--senders", "1"},
		{"--hintless", "--shape", "nope"},
		{hintlessServerArg, "--rate", "x"},
	} {
		var out, errb bytes.Buffer
		if code := runBench(args, &out, &errb); code != 2 {
			t.Errorf("runBench(%q) = %d; want 2", args, code)
		}
		if errb.Len() == 0 {
			t.Errorf("runBench(%q) wrote nothing on stderr; want what is wrong", args)
		}
	}
}

// hintlessServerEnv makes this test binary the server of --hintless (see
// TestBenchHintlessServerHelper).
const hintlessServerEnv = "ROCKETRY_TEST_HINTLESS_SERVER"

// TestBenchHintlessServerHelper is not a test: run as a child process with
// hintlessServerEnv set, it is "rocketry-bench serve-hintless" with the
// arguments after "--".
func TestBenchHintlessServerHelper(t *testing.T) {
	if os.Getenv(hintlessServerEnv) != "1" {
		t.Skip("the server process of TestBenchHintless")
	}
	i := slices.Index(os.Args, "--")
	os.Exit(runBench(append([]string{hintlessServerArg}, os.Args[i+1:]...), os.Stdout, os.Stderr))
}

// TestBenchHintless runs --hintless for 300 ms per contender, one round,
// with 4 senders against a server of 300 msg/s (burst 30) in a child
// process: it checks that the mode runs, counts and reports, not how
// well anyone does.
func TestBenchHintless(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	orig := hintlessServerCommand
	t.Cleanup(func() { hintlessServerCommand = orig })
	hintlessServerCommand = func() ([]string, []string, error) {
		// GORACE: a -race binary sleeps 1 s when it exits, unless told not to.
		return []string{os.Args[0], "-test.run=^TestBenchHintlessServerHelper$", "--"}, []string{hintlessServerEnv + "=1", "GORACE=atexit_sleep_ms=0"}, nil
	}
	args := []string{"--hintless", "--json", "--markdown", "--duration", "300ms", "--settle", "100ms", "--senders", "4", "--rate", "300", "--burst", "30"}
	rep := runPrinted(t, args, "| contender | stored msg/s | stored/capacity | after 0.1s |", "| rocketry |", "| raw |")
	h := rep.Hintless
	if h == nil || len(h.Summary) != 4 || len(h.Runs) != 4 || h.Settings.Rate != 300 || h.Settings.Burst != 30 || h.Settings.MaxAttempts != 5 {
		t.Fatalf("hintless = %+v; want 4 contenders, 1 run each, rate 300, burst 30, 5 attempts", h)
	}
	for i, name := range []string{"rocketry", "middleware", "serviceconfig", "raw"} {
		r := h.Runs[i]
		if r.Contender != name || r.Round != 1 {
			t.Errorf("run %d = %s round %d; want %s round 1", i, r.Contender, r.Round, name)
		}
		if r.SettleSeconds != 0.1 || r.SettledRatio < 0 || (name == "raw" && r.SettledRatio == 0) {
			// (A retrying contender's 4 senders can all be asleep
			// after the first instant's refusals: 0 is a figure.)
			t.Errorf("%s: settled %v after %vs; want a share of capacity after 0.1s (raw's over 0)", r.Contender, r.SettledRatio, r.SettleSeconds)
		}
		if r.Sent == 0 || r.Stored == 0 || r.Attempts < r.Stored || r.Attempts != r.Stored+r.Refused || r.StoredPerSecond <= 0 {
			t.Errorf("%s: sent %d, stored %d, attempts %d, refused %d, stored/s %v; want stored > 0 and attempts = stored + refused",
				r.Contender, r.Sent, r.Stored, r.Attempts, r.Refused, r.StoredPerSecond)
		}
	}
	if raw := h.Runs[3]; raw.Failed != raw.Refused {
		t.Errorf("raw: failed %d, refused %d; want every refusal to fail a send (no retry)", raw.Failed, raw.Refused)
	}
}

// TestBenchHintlessHotCold runs --hintless --shape hot-cold with rocketry
// and middleware, one round, phases of 200 ms, 8 senders (4 to each
// topic), topic "hot" throttled at 5/s with a burst of 2, and the hog; the
// server and the hog are child processes (this test binary): it checks
// that the three phases ran and were counted, that hot was throttled by
// its bucket and cold was not, and that the ratio is the counts', not how
// well anyone does.
func TestBenchHintlessHotCold(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	origServer, origChild := hintlessServerCommand, benchChildCommand
	t.Cleanup(func() { hintlessServerCommand, benchChildCommand = origServer, origChild })
	env := []string{"GORACE=atexit_sleep_ms=0"} // a -race binary sleeps 1 s when it exits, unless told not to
	hintlessServerCommand = func() ([]string, []string, error) {
		return []string{os.Args[0], "-test.run=^TestBenchHintlessServerHelper$", "--"}, append([]string{hintlessServerEnv + "=1"}, env...), nil
	}
	benchChildCommand = func(sub string) ([]string, []string, error) {
		return []string{os.Args[0], "-test.run=^TestBenchChildHelper$", "--", sub}, append([]string{benchChildEnv + "=1"}, env...), nil
	}
	args := []string{"--hintless", "--shape", "hot-cold", "--json", "--markdown", "--contenders", "rocketry,middleware",
		"--duration", "200ms", "--senders", "8", "--rate", "5", "--burst", "2", "--hog"}
	rep := runPrinted(t, args,
		`shape hot-cold: one producer per contender, 4 senders to topic "cold" (stored always) and 4 to topic "hot" (a token bucket of 5 msg/s, burst 2,`,
		"three phases of 0.2s", "one more process spins a CPU core",
		"| contender | cold alone before msg/s | cold beside hot msg/s | cold alone after msg/s | **beside/alone** |", "| rocketry |", "| middleware |",
	)
	h := rep.Hintless
	if h == nil || len(h.Summary) != 2 || len(h.Runs) != 2 {
		t.Fatalf("hintless = %+v; want 2 contenders, 1 run each", h)
	}
	if s := h.Settings; s.Shape != "hot-cold" || s.Rate != 5 || s.Burst != 2 || s.DurationSeconds != 0.2 || s.WarmupSeconds != 0.02 || !s.Hog || s.SettleSeconds != 0 {
		t.Errorf("settings = %+v; want hot-cold, rate 5, burst 2, 0.2 s phases, 0.02 s of warmup, the hog, no settled figure", s)
	}
	for i, name := range []string{"rocketry", "middleware"} {
		r := h.Runs[i]
		hc := r.HotCold
		if r.Contender != name || hc == nil || h.Summary[i].HotCold == nil {
			t.Fatalf("run %d = %+v; want %s's, with hot-cold figures and their summary", i, r, name)
		}
		// Both phases ran: each at least --duration, with cold stored in
		// each and hot sending beside.
		if hc.BeforeSeconds < 0.2 || hc.BesideSeconds < 0.2 || hc.AfterSeconds < 0.2 || hc.DrainSeconds < 0 {
			t.Errorf("%s: phases %vs, %vs, %vs (drain %vs); want each at least 0.2 s", name, hc.BeforeSeconds, hc.BesideSeconds, hc.AfterSeconds, hc.DrainSeconds)
		}
		if hc.ColdStoredBefore <= 0 || hc.ColdStoredBeside <= 0 || hc.ColdStoredAfter <= 0 || hc.HotSent <= 0 || hc.HotStoredBeside <= 0 {
			t.Errorf("%s: cold stored %d, %d, %d; hot sent %d, stored %d beside; want every one > 0",
				name, hc.ColdStoredBefore, hc.ColdStoredBeside, hc.ColdStoredAfter, hc.HotSent, hc.HotStoredBeside)
		}
		// Hot is throttled by its bucket: at most the burst and the rate
		// over the time hot sent, and refused beyond it.
		if most := 2 + 5*(hc.BesideSeconds+hc.DrainSeconds); float64(hc.HotStored) > most+1 || hc.HotStoredBeside > hc.HotStored {
			t.Errorf("%s: hot stored %d (%d beside) in %vs + %vs; want at most the burst and the rate's %.1f", name, hc.HotStored, hc.HotStoredBeside, hc.BesideSeconds, hc.DrainSeconds, most)
		}
		if hc.HotRefused <= 0 || hc.HotAttempts != hc.HotStored+hc.HotRefused {
			t.Errorf("%s: hot attempts %d, stored %d, refused %d; want refusals, attempts = stored + refused", name, hc.HotAttempts, hc.HotStored, hc.HotRefused)
		}
		if want := 5 * hc.HotShare; math.Abs(hc.HotPerSecond-want) > 1e-9 || math.Abs(hc.HotPerSecond-float64(hc.HotStoredBeside)/hc.BesideSeconds) > 1e-9 {
			t.Errorf("%s: hot %v/s, share %v; want hot stored beside / beside's seconds, over the rate", name, hc.HotPerSecond, hc.HotShare)
		}
		// Cold is not: no refusal, no failure.
		if hc.ColdRefused != 0 || hc.ColdFailed != 0 || r.Refused != hc.HotRefused {
			t.Errorf("%s: cold refused %d, failed %d; refused %d in all, %d hot; want cold never refused nor failed", name, hc.ColdRefused, hc.ColdFailed, r.Refused, hc.HotRefused)
		}
		// The ratio is the counts': beside's rate over the alone phases' pooled.
		beside := float64(hc.ColdStoredBeside) / hc.BesideSeconds
		alone := float64(hc.ColdStoredBefore+hc.ColdStoredAfter) / (hc.BeforeSeconds + hc.AfterSeconds)
		if math.Abs(hc.Beside-beside) > 1e-6 || math.Abs(hc.Alone-alone) > 1e-6 || math.Abs(hc.Ratio-beside/alone) > 1e-9 {
			t.Errorf("%s: beside %v/s, alone %v/s, ratio %v; want %v, %v and %v from the counts", name, hc.Beside, hc.Alone, hc.Ratio, beside, alone, beside/alone)
		}
		if r.Sent != hc.ColdSent+hc.HotSent || r.Failed != hc.ColdFailed+hc.HotFailed {
			t.Errorf("%s: sent %d, failed %d; want cold's and hot's sums", name, r.Sent, r.Failed)
		}
	}
}

// TestHotColdDefaults: --shape hot-cold is the 500/s with a burst
// of 50 and 5 s phases unless the flags say otherwise.
func TestHotColdDefaults(t *testing.T) {
	h := bench.DefaultHintless()
	hotColdDefaults(&h, map[string]bool{})
	if h.Rate != 500 || h.Burst != 50 || h.Duration != 5*time.Second {
		t.Errorf("defaults: rate %v, burst %d, duration %v; want 500, 50, 5s", h.Rate, h.Burst, h.Duration)
	}
	h = bench.DefaultHintless()
	h.Rate, h.Burst, h.Duration = 7, 3, time.Second
	hotColdDefaults(&h, map[string]bool{"rate": true, "burst": true, "duration": true})
	if h.Rate != 7 || h.Burst != 3 || h.Duration != time.Second {
		t.Errorf("flags set: rate %v, burst %d, duration %v; want 7, 3, 1s kept", h.Rate, h.Burst, h.Duration)
	}
}

// runPrinted runs runBench(args), which must exit 0, checks that its
// Markdown has every one of wants, and returns the JSON report that
// follows the Markdown.
func runPrinted(t *testing.T, args []string, wants ...string) benchReport {
	t.Helper()
	var out, errb bytes.Buffer
	start := time.Now()
	if code := runBench(args, &out, &errb); code != 0 {
		t.Fatalf("runBench(%q) = %d; want 0 (stderr %q)", args, code, errb.String())
	}
	t.Logf("took %v", time.Since(start))
	text := out.String()
	for _, want := range wants {
		if !strings.Contains(text, want) {
			t.Errorf("runBench(%q) printed %q; want it to contain %q", args, text, want)
		}
	}
	var rep benchReport
	i := strings.Index(text, "{\n")
	if i < 0 {
		t.Fatalf("runBench(%q) printed %q; want Markdown then JSON", args, text)
	}
	if err := json.Unmarshal([]byte(text[i:]), &rep); err != nil {
		t.Fatalf("runBench(%q) printed %q: %v; want Markdown then JSON", args, text, err)
	}
	return rep
}
