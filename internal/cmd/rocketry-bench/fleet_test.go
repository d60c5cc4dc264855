package main

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// benchChildEnv makes this test binary a child of --fleet (see
// TestBenchChildHelper).
const benchChildEnv = "ROCKETRY_TEST_BENCH_CHILD"

// TestBenchChildHelper is not a test: run as a child process with
// benchChildEnv set, it is "rocketry-bench" with the arguments after "--"
// (a hidden subcommand and its flags).
func TestBenchChildHelper(t *testing.T) {
	if os.Getenv(benchChildEnv) != "1" {
		t.Skip("a child process of TestBenchFleet")
	}
	i := slices.Index(os.Args, "--")
	os.Exit(runBench(os.Args[i+1:], os.Stdout, os.Stderr))
}

// TestBenchFleet runs --fleet with middleware only, one round: 2 producer
// processes of 2 senders, started 300 ms apart, for 1.5 s against a
// server of 400 msg/s (burst 40) that drops to 200 msg/s at 1 s, and the
// hog, every child this test binary: it checks that the mode runs, counts
// and reports, not how well anyone does.
func TestBenchFleet(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	orig := benchChildCommand
	t.Cleanup(func() { benchChildCommand = orig })
	benchChildCommand = func(sub string) ([]string, []string, error) {
		// GORACE: a -race binary sleeps 1 s when it exits, unless told not to.
		return []string{os.Args[0], "-test.run=^TestBenchChildHelper$", "--", sub}, []string{benchChildEnv + "=1", "GORACE=atexit_sleep_ms=0"}, nil
	}
	args := []string{"--fleet", "--json", "--markdown", "--contenders", "middleware", "--producers", "2", "--senders", "2",
		"--apart", "300ms", "--duration", "1500ms", "--rate", "400", "--burst", "40", "--steps", "1s:200", "--hog", "--latency", "4ms"}
	rep := runPrinted(t, args,
		"fleet: 2 producer processes x 2 senders (started 0.3s apart) for 1.5s",
		"400 msg/s, 200 msg/s from 1s (burst 40)", "every call takes 4 ms more (a round trip)", "one more process spins a CPU core",
		"| contender | stored msg/s | stored/capacity |", "| middleware |",
	)
	f := rep.Fleet
	if f == nil || len(f.Summary) != 1 || len(f.Runs) != 1 || f.Settings.Producers != 2 || f.Settings.Senders != 2 ||
		len(f.Settings.Steps) != 1 || !f.Settings.Hog || f.Settings.LatencyMs != 4 {
		t.Fatalf("fleet = %+v; want 1 contender, 1 run, 2 producers of 2 senders, 1 step, the hog, 4 ms of latency", f)
	}
	r := f.Runs[0]
	if r.Contender != "middleware" || len(r.Producers) != 2 || len(r.Phases) != 2 {
		t.Fatalf("run = %+v; want middleware's, 2 producers, 2 phases", r)
	}
	var sent, failed, stored int64
	for i, p := range r.Producers {
		if p.Producer != i || p.Sent == 0 || p.Stored == 0 || p.Bins != nil {
			t.Errorf("producer %d = %+v; want its index, sends and stores, no bins in the report", i, p)
		}
		if want := 0.3 * float64(i); p.DelaySeconds != want || p.StartedSeconds < want {
			t.Errorf("producer %d: delay %vs, started at %vs; want %vs and not before", i, p.DelaySeconds, p.StartedSeconds, want)
		}
		sent, failed, stored = sent+p.Sent, failed+p.Failed, stored+p.Stored
	}
	if r.Sent != sent || r.Failed != failed || r.Stored != stored || r.Attempts != r.Stored+r.Refused || r.StoredPerSecond <= 0 {
		t.Errorf("run: sent %d, failed %d, stored %d, attempts %d, refused %d, stored/s %v; want the producers' sums (%d, %d, %d), attempts = stored + refused",
			r.Sent, r.Failed, r.Stored, r.Attempts, r.Refused, r.StoredPerSecond, sent, failed, stored)
	}
	if r.ServerStoredInWindow <= 0 || r.ServerStoredInWindow > r.Stored {
		t.Errorf("server stored %d in the window, %d in all; want 0 < window <= all", r.ServerStoredInWindow, r.Stored)
	}
}

func TestBenchFleetBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string // named in the error
	}{
		{[]string{"--fleet", "--steps", "10s"}, "--steps"},
		{[]string{"--fleet", "--steps", "10s:0"}, "--steps"},
		{[]string{"--fleet", "--producers", "0"}, "--producers"},
		{[]string{"--fleet", "--senders", "0"}, "--senders"},
		{[]string{"--fleet", "--apart", "-1s"}, "--apart"},
		{[]string{"--fleet", "--apart", "5s", "--duration", "10s", "--producers", "3"}, "--apart"},
		{[]string{"--fleet", "--rate", "0"}, "--rate"},
		{[]string{"--fleet", "--burst", "0"}, "--burst"},
		{[]string{"--fleet", "--duration", "0s"}, "--duration"},
		{[]string{"--fleet", "--contenders", "naive-sleep"}, "--contenders"},
		{[]string{"--fleet", "--rounds", "0"}, "--rounds"},
		{[]string{"--fleet", "--hintless"}, "--hintless"},
		{[]string{"--fleet", "--shape", "hot"}, "--shape"},
		{[]string{"--producers", "2"}, "--fleet"},
		{[]string{"--hog"}, "--fleet or --hintless"},
		{[]string{hintlessServerArg, "--steps", "x"}, "--steps"},
		{[]string{fleetProducerArg, "--senders", "2"}, "--addr"},
		{[]string{fleetProducerArg, "--addr", "x", "--delay", "2s", "--duration", "1s"}, "--duration"},
		{[]string{hogArg, "extra"}, "extra"},
	} {
		var out, errb bytes.Buffer
		if code := runBench(tc.args, &out, &errb); code != 2 {
			t.Errorf("runBench(%q) = %d; want 2", tc.args, code)
		}
		if !strings.Contains(errb.String(), tc.flag) {
			t.Errorf("runBench(%q) wrote %q on stderr; want it to name %s", tc.args, errb.String(), tc.flag)
		}
	}
}
