package main

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
)

type scheduleJSON struct {
	TotalRetries int     `json:"total_retries"`
	TotalSeconds float64 `json:"total_seconds"`
	Retries      []struct {
		Retry          int     `json:"retry"`
		Phase          string  `json:"phase"`
		DelaySeconds   float64 `json:"delay_seconds"`
		ElapsedSeconds float64 `json:"elapsed_seconds"`
	} `json:"retries"`
}

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func scheduleOK(t *testing.T, args ...string) scheduleJSON {
	t.Helper()
	code, out, errs := runCLI(t, append([]string{"schedule", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("rocketry schedule --json %s = exit %d, stderr %q; want 0", strings.Join(args, " "), code, errs)
	}
	var s scheduleJSON
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("rocketry schedule --json %s: output is not the documented JSON: %v\n%s", strings.Join(args, " "), err, out)
	}
	return s
}

func TestScheduleConnectionBackoffJSON(t *testing.T) {
	s := scheduleOK(t, "--connection-backoff", "--retries", "15", "--no-jitter")
	want := []float64{1, 1.6, 2.56, 4.096, 6.5536, 10.48576, 16.777216, 26.843546, 42.949673,
		68.719477, 109.951163, 120, 120, 120, 120}
	if s.TotalRetries != 15 || len(s.Retries) != 15 {
		t.Fatalf("total_retries %d with %d rows; want 15", s.TotalRetries, len(s.Retries))
	}
	var elapsed float64
	for i, r := range s.Retries {
		elapsed += want[i]
		if r.Retry != i+1 || r.Phase != "backoff" || r.DelaySeconds != want[i] || math.Abs(r.ElapsedSeconds-elapsed) > 1e-6 {
			t.Errorf("retries[%d] = %+v; want retry %d, backoff, %v, elapsed %v", i, r, i+1, want[i], elapsed)
		}
	}
	if math.Abs(s.TotalSeconds-elapsed) > 1e-6 {
		t.Errorf("total_seconds = %v; want %v", s.TotalSeconds, elapsed)
	}
	// The printed numbers are short: 2.56, not 2.5600000000000005.
	_, out, _ := runCLI(t, "schedule", "--connection-backoff", "--retries", "3", "--no-jitter", "--json")
	if !strings.Contains(out, `"delay_seconds": 2.56,`) {
		t.Errorf("JSON output does not print 2.56 plainly:\n%s", out)
	}
}

func TestScheduleConnectionBackoffJitter(t *testing.T) {
	nominal := scheduleOK(t, "--connection-backoff", "--retries", "12", "--no-jitter")
	sums := make([]float64, 12)
	const seeds = 300
	for seed := range seeds {
		s := scheduleOK(t, "--connection-backoff", "--retries", "12", "--seed", itoa(seed))
		for i, r := range s.Retries {
			n := nominal.Retries[i].DelaySeconds
			if i == 0 && r.DelaySeconds != 1 {
				t.Fatalf("seed %d: retry 1 delay %v; want exactly 1", seed, r.DelaySeconds)
			}
			if r.DelaySeconds < 0.8*n-1e-6 || r.DelaySeconds > 1.2*n+1e-6 {
				t.Fatalf("seed %d: retry %d delay %v; want within 20%% of %v", seed, i+1, r.DelaySeconds, n)
			}
			sums[i] += r.DelaySeconds
		}
	}
	for i, sum := range sums {
		// Standard error 0.4/sqrt(12*300) = 0.67%; allow 4 of them.
		if n := nominal.Retries[i].DelaySeconds; math.Abs(sum/seeds/n-1) > 0.027 {
			t.Errorf("retry %d: mean delay %v over %d seeds; want about %v", i+1, sum/seeds, seeds, n)
		}
	}
	a := scheduleOK(t, "--connection-backoff", "--seed", "42")
	b := scheduleOK(t, "--connection-backoff", "--seed", "42")
	if len(a.Retries) != 10 || a.TotalSeconds != b.TotalSeconds {
		t.Errorf("--seed 42 twice: %d retries, totals %v and %v; want 10 retries (the default) and equal totals",
			len(a.Retries), a.TotalSeconds, b.TotalSeconds)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestScheduleSNSExamplePolicy(t *testing.T) {
	s := scheduleOK(t, "--policy", "testdata/sns-example.json", "--no-jitter")
	if s.TotalRetries != 50 || len(s.Retries) != 50 {
		t.Fatalf("total_retries %d, %d rows; want 50", s.TotalRetries, len(s.Retries))
	}
	counts := map[string]int{}
	var backoff []float64
	for _, r := range s.Retries {
		counts[r.Phase]++
		switch r.Phase {
		case "immediate":
			if r.DelaySeconds != 0 {
				t.Errorf("retry %d immediate with delay %v", r.Retry, r.DelaySeconds)
			}
		case "pre-backoff":
			if r.DelaySeconds != 1 {
				t.Errorf("retry %d pre-backoff delay %v; want 1", r.Retry, r.DelaySeconds)
			}
		case "backoff":
			backoff = append(backoff, r.DelaySeconds)
		case "post-backoff":
			if r.DelaySeconds != 60 {
				t.Errorf("retry %d post-backoff delay %v; want 60", r.Retry, r.DelaySeconds)
			}
		}
	}
	want := map[string]int{"immediate": 3, "pre-backoff": 2, "backoff": 10, "post-backoff": 35}
	for ph, n := range want {
		if counts[ph] != n {
			t.Errorf("%d %s retries; want %d (all: %v)", counts[ph], ph, n, counts)
		}
	}
	if len(backoff) == 10 && (backoff[0] != 1 || backoff[9] != 60) {
		t.Errorf("backoff phase from %v to %v; want 1 to 60", backoff[0], backoff[9])
	}
	for i := 1; i < len(backoff); i++ {
		if backoff[i] < backoff[i-1] {
			t.Errorf("backoff delays decrease: %v", backoff)
		}
	}
	// --retries limits the rows, not the totals.
	short := scheduleOK(t, "--policy", "testdata/sns-example.json", "--no-jitter", "--retries", "5")
	if short.TotalRetries != 50 || len(short.Retries) != 5 || short.TotalSeconds != s.TotalSeconds {
		t.Errorf("--retries 5: total %d, %d rows, %v s; want 50, 5, %v s", short.TotalRetries, len(short.Retries), short.TotalSeconds, s.TotalSeconds)
	}
}

func TestSchedulePresets(t *testing.T) {
	tests := []struct {
		preset  string
		retries int
		minDays float64
	}{
		{"aws-managed", 100_015, 23},
		{"customer-managed", 50, 0.25},
	}
	for _, tt := range tests {
		s := scheduleOK(t, "--preset", tt.preset, "--no-jitter")
		if s.TotalRetries != tt.retries || len(s.Retries) != tt.retries {
			t.Errorf("--preset %s: total_retries %d, %d rows; want %d", tt.preset, s.TotalRetries, len(s.Retries), tt.retries)
		}
		if days := s.TotalSeconds / 86400; days < tt.minDays {
			t.Errorf("--preset %s: %v days; want at least %v", tt.preset, days, tt.minDays)
		}
	}
	code, out, _ := runCLI(t, "schedule", "--preset", "aws-managed", "--seed", "1")
	if code != 0 || !strings.Contains(out, "100,015 retries") || !strings.Contains(out, "99,905 retries not shown") ||
		strings.Count(out, "\n") > 130 {
		t.Errorf("--preset aws-managed table: exit %d, %d lines; want a summary of 100,015 retries with the middle elided:\n%.2000s",
			code, strings.Count(out, "\n"), out)
	}
}

func TestScheduleTable(t *testing.T) {
	code, out, errs := runCLI(t, "schedule", "--connection-backoff", "--retries", "3", "--no-jitter")
	want := []string{"retry", "phase", "delay", "elapsed", "1  backoff", "1.6s", "2.56s", "5.16s", "3 retries (attempts = retries + 1)"}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("table lacks %q (exit %d, stderr %q):\n%s", w, code, errs, out)
		}
	}
}

func TestScheduleUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{nil, []string{"exactly one of --connection-backoff, --policy", "--preset"}},
		{[]string{"--connection-backoff", "--preset", "aws-managed"}, []string{"exactly one of"}},
		{[]string{"--preset", "aws"}, []string{`--preset "aws"`, "aws-managed, customer-managed"}},
		{[]string{"--policy", "testdata/typo.json"}, []string{"testdata/typo.json", "healthyRetryPolicy.numRetrys", "unknown field"}},
		{[]string{"--policy", "testdata/too-many-retries.json"}, []string{"healthyRetryPolicy.numRetries = 101", "0..100"}},
		{[]string{"--policy", "testdata/over-an-hour.json"}, []string{"total retry time", "3660s", "0..3600"}},
		{[]string{"--policy", "testdata/missing.json"}, []string{"--policy", "missing.json"}},
		{[]string{"--connection-backoff", "--retries", "-1"}, []string{"--retries = -1", "0..1000000"}},
		{[]string{"--connection-backoff", "--retries", "x"}, []string{"-retries"}},
		{[]string{"--connection-backoff", "--nojitter"}, []string{"nojitter"}},
		{[]string{"--connection-backoff", "extra"}, []string{`"extra"`}},
		{[]string{"--connection-backoff", "--plot", "x.png"}, []string{"x.png", "SVG", "rsvg-convert"}},
		{[]string{"--connection-backoff", "--plot", "x.pdf"}, []string{"x.pdf", ".svg"}},
	}
	for _, tt := range tests {
		args := append([]string{"schedule"}, tt.args...)
		code, out, errs := runCLI(t, args...)
		if code != 2 || out != "" || strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "rocketry schedule: ") {
			t.Errorf("rocketry %s = exit %d, stdout %q, stderr %q; want exit 2 and one line on stderr",
				strings.Join(args, " "), code, out, errs)
		}
		for _, w := range tt.want {
			if !strings.Contains(errs, w) {
				t.Errorf("rocketry %s: stderr %q; want it to contain %q", strings.Join(args, " "), errs, w)
			}
		}
	}
	code, out, _ := runCLI(t, "schedule", "-h")
	if code != 0 || !strings.Contains(out, "--connection-backoff") {
		t.Errorf("rocketry schedule -h = exit %d, %q; want 0 and the usage", code, out)
	}
}
