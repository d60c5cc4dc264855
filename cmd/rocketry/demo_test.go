package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// smallDemo is a demo small and fast enough for a test that still goes
// through both kinds of throttling, failures, and a restart.
var smallDemo = []string{
	"--messages", "2000",
	"--sync-workers", "4",
	"--max-in-flight", "64",
	"--max-backlog", "100",
	"--consume-rate", "600",
	"--cold-read-distance", "20",
	"--max-storage-load", "200",
	"--reread-rate", "5000",
	"--reset-at", "0.3",
	"--restart-at", "0.6",
	"--internal-rate", "0.05",
	"--time-scale", "0.005",
	"--timeout", "60s",
}

func TestDemoJSON(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var out, errb bytes.Buffer
	args := append([]string{"demo", "--json"}, smallDemo...)
	code := run(args, &out, &errb)
	if code != 0 {
		t.Errorf("run(demo --json ...) = %d; want 0\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	if errb.Len() != 0 {
		t.Errorf("run(demo --json ...) wrote to stderr, which is not a terminal: %q; want nothing", errb.String())
	}
	var got struct {
		Sent                int                `json:"sent"`
		Stored              int                `json:"stored"`
		DeadLettered        int                `json:"dead_lettered"`
		Lost                *int               `json:"lost"`
		DuplicatesStored    *int               `json:"duplicates_stored"`
		Attempts            int64              `json:"attempts"`
		Throttled           map[string]int64   `json:"throttled"`
		RetriesAfterFailure int64              `json:"retries_after_failure"`
		LatencyMS           map[string]float64 `json:"latency_ms"`
		ElapsedSeconds      float64            `json:"elapsed_seconds"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("json.Unmarshal(demo --json output) = %v; want one JSON object\n%s", err, out.String())
	}
	checks := []struct {
		name string
		ok   bool
		got  any
		want string
	}{
		{"sent", got.Sent == 2000, got.Sent, "2000"},
		{"stored+dead_lettered", got.Stored+got.DeadLettered >= 2000, got.Stored + got.DeadLettered, ">= 2000"},
		{"lost", got.Lost != nil && *got.Lost == 0, deref(got.Lost), "0"},
		{"duplicates_stored", got.DuplicatesStored != nil && *got.DuplicatesStored == 0, deref(got.DuplicatesStored), "0"},
		{"attempts", got.Attempts >= 2000, got.Attempts, ">= 2000"},
		{"throttled.BACKLOG", got.Throttled["BACKLOG"] > 0, got.Throttled["BACKLOG"], "> 0"},
		{"throttled.STORAGE_LOAD", got.Throttled["STORAGE_LOAD"] > 0, got.Throttled["STORAGE_LOAD"], "> 0"},
		{"retries_after_failure", got.RetriesAfterFailure > 0, got.RetriesAfterFailure, "> 0"},
		{"latency_ms.p50 <= p99 <= max", got.LatencyMS["p50"] <= got.LatencyMS["p99"] && got.LatencyMS["p99"] <= got.LatencyMS["max"] && got.LatencyMS["max"] > 0, got.LatencyMS, "ordered, max > 0"},
		{"elapsed_seconds", got.ElapsedSeconds > 0, got.ElapsedSeconds, "> 0"},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("demo --json: %s = %v; want %s", c.name, c.got, c.want)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out.String())
	}
}

func deref(p *int) any {
	if p == nil {
		return "missing"
	}
	return *p
}

func TestDemoText(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var out, errb bytes.Buffer
	// Later flags win: a short run without the backtrack and the restart.
	args := append(append([]string{"demo"}, smallDemo...), "--messages", "300", "--reset-at", "0", "--restart-at", "0")
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("run(demo --messages 300 ...) = %d; want 0\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{
		"rocketry demo: 300 messages", "after 530", "dead letters",
		"messages sent", "stored", "dead-lettered", "lost", "duplicates stored",
		"attempts per message", "throttled (530) BACKLOG", "throttled (530) STORAGE_LOAD",
		"retries after failures", "latency p50", "latency p99", "latency max", "elapsed",
		"OK: nothing lost, nothing stored twice",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo text output lacks %q:\n%s", want, out.String())
		}
	}
	if errb.Len() != 0 {
		t.Errorf("demo wrote to stderr, which is not a terminal: %q; want nothing", errb.String())
	}
}

func TestDemoBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string // in the one line on stderr
	}{
		{[]string{"--messages", "0"}, "--messages"},
		{[]string{"--messages", "x"}, "messages"},
		{[]string{"--no-such-flag"}, "no-such-flag"},
		{[]string{"--async-share", "1.5"}, "--async-share"},
		{[]string{"--internal-rate", "1"}, "--internal-rate"},
		{[]string{"--internal-rate", "-0.1"}, "--internal-rate"},
		{[]string{"--time-scale", "0"}, "--time-scale"},
		{[]string{"--consume-rate", "-1"}, "--consume-rate"},
		{[]string{"--max-backlog", "-1"}, "--max-backlog"},
		{[]string{"--max-attempts", "0"}, "--max-attempts"},
		{[]string{"--failure-backoff", "sometimes"}, "--failure-backoff"},
		{[]string{"--restart-at", "2"}, "--restart-at"},
		{[]string{"--queues", "0"}, "--queues"},
		{[]string{"extra"}, "extra"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(append([]string{"demo"}, tt.args...), &out, &errb)
			if code != 2 {
				t.Errorf("run(demo %v) = %d; want 2", tt.args, code)
			}
			msg := errb.String()
			if strings.Count(msg, "\n") != 1 || !strings.HasSuffix(msg, "\n") {
				t.Errorf("run(demo %v) stderr = %q; want exactly one line", tt.args, msg)
			}
			if !strings.Contains(msg, tt.want) || !strings.HasPrefix(msg, "rocketry demo: ") {
				t.Errorf("run(demo %v) stderr = %q; want a line starting with \"rocketry demo: \" naming %q", tt.args, msg, tt.want)
			}
			if out.Len() != 0 {
				t.Errorf("run(demo %v) stdout = %q; want nothing", tt.args, out.String())
			}
		})
	}
}

func TestDemoHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"demo", "-h"}, &out, &errb); code != 0 {
		t.Errorf("run(demo -h) = %d; want 0", code)
	}
	for _, want := range []string{"-messages", "-json", "-seed", "-time-scale", "-internal-rate", "-max-backlog"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("run(demo -h) output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestDemoThrottleConfigScales(t *testing.T) {
	tests := []struct {
		scale                      float64
		base, maxDelay, minConnect time.Duration
	}{
		{1, time.Second, 120 * time.Second, 20 * time.Second},
		{0.01, 10 * time.Millisecond, 1200 * time.Millisecond, 200 * time.Millisecond},
		{0.001, time.Millisecond, 120 * time.Millisecond, 20 * time.Millisecond},
	}
	for _, tt := range tests {
		c := demoConfig{timeScale: tt.scale}
		got := c.throttleConfig()
		if got.BaseDelay != tt.base || got.MaxDelay != tt.maxDelay || got.MinConnectTimeout != tt.minConnect ||
			got.Multiplier != 1.6 || got.Jitter != 0.2 {
			t.Errorf("demoConfig{timeScale: %v}.throttleConfig() = %+v; want base %v, max %v, min connect %v, x1.6, jitter 0.2",
				tt.scale, got, tt.base, tt.maxDelay, tt.minConnect)
		}
	}
}

func TestDemoFmtCount(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, "0"}, {999, "999"}, {1000, "1,000"}, {20000, "20,000"}, {1234567, "1,234,567"}, {-1500, "-1,500"},
	}
	for _, tt := range tests {
		if got := fmtCount(tt.n); got != tt.want {
			t.Errorf("fmtCount(%d) = %q; want %q", tt.n, got, tt.want)
		}
	}
}
