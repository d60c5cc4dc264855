package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/producer"
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

// TestDemoJSON runs the small demo on each protocol, with the producer's
// defaults (pacing on): nothing lost; over rocketry.v1, which deduplicates,
// nothing stored twice; over apache.rocketmq.v2, whose face stores a
// message sent again as the Apache proxy does, no more copies than the
// unknown outcomes the producer met; and the summary counts what happened.
func TestDemoJSON(t *testing.T) {
	for _, tc := range []struct {
		protocol string
		extra    []string
		wire     string
		failure  string // a failure code the fault injection produces
	}{
		{"rocketry", nil, "rocketry.v1", "INTERNAL"},
		{"rocketmq", nil, "apache.rocketmq.v2", "INTERNAL_SERVER_ERROR"},
		{"rocketmq", []string{"--pacing=false"}, "apache.rocketmq.v2", "INTERNAL_SERVER_ERROR"},
	} {
		t.Run(strings.Join(append([]string{tc.protocol}, tc.extra...), " "), func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			var out, errb bytes.Buffer
			args := append(append([]string{"demo", "--json", "--protocol", tc.protocol}, smallDemo...), tc.extra...)
			code := run(args, &out, &errb)
			assert.Equal(t, 0, code, "run(%v)\nstdout:\n%s\nstderr:\n%s", args, out.String(), errb.String())
			assert.Empty(t, errb.String(), "stderr is not a terminal: nothing on it")
			var got struct {
				Sent                      int                `json:"sent"`
				Stored                    int                `json:"stored"`
				DeadLettered              int                `json:"dead_lettered"`
				Lost                      *int               `json:"lost"`
				DuplicatesStored          *int               `json:"duplicates_stored"`
				Copies                    *int64             `json:"copies"`
				UnknownOutcomes           *int64             `json:"unknown_outcomes"`
				Attempts                  int64              `json:"attempts"`
				Throttled                 map[string]int64   `json:"throttled"`
				RetriesAfterThrottle      int64              `json:"retries_after_throttle"`
				RetriesAfterFailure       int64              `json:"retries_after_failure"`
				RetriesAfterFailureByCode map[string]int64   `json:"retries_after_failure_by_code"`
				RetriesAfterFailureByKind map[string]int64   `json:"retries_after_failure_by_kind"`
				LatencyMS                 map[string]float64 `json:"latency_ms"`
				ElapsedSeconds            float64            `json:"elapsed_seconds"`
				FIFO                      *demoFIFO          `json:"fifo"`
				Config                    struct {
					Protocol string `json:"protocol"`
				} `json:"config"`
			}
			require.NoError(t, json.Unmarshal(out.Bytes(), &got), "demo --json output:\n%s", out.String())
			defer func() {
				if t.Failed() {
					t.Logf("output:\n%s", out.String())
				}
			}()
			assert.Equal(t, 2000, got.Sent, "sent")
			assert.GreaterOrEqual(t, got.Stored+got.DeadLettered, 2000, "stored+dead_lettered")
			assert.Equal(t, 0, deref(got.Lost), "lost")
			require.NotNil(t, got.Copies, "copies")
			require.NotNil(t, got.UnknownOutcomes, "unknown_outcomes")
			assert.LessOrEqual(t, *got.Copies, *got.UnknownOutcomes, "copies against unknown_outcomes")
			assert.LessOrEqual(t, int64(deref(got.DuplicatesStored)), *got.Copies, "duplicates_stored (IDs) against copies")
			assert.Equal(t, *got.Copies > 0, deref(got.DuplicatesStored) > 0, "duplicates_stored %d, copies %d", deref(got.DuplicatesStored), *got.Copies)
			if tc.protocol == "rocketry" {
				assert.Zero(t, *got.Copies, "copies over rocketry.v1, which deduplicates")
			}
			t.Logf("%s: stored twice %d (copies %d), unknown outcomes %d", tc.wire, deref(got.DuplicatesStored), *got.Copies, *got.UnknownOutcomes)
			assert.GreaterOrEqual(t, got.Attempts, int64(2000), "attempts")
			assert.Positive(t, got.Throttled["BACKLOG"], "throttled.BACKLOG")
			assert.Positive(t, got.Throttled["STORAGE_LOAD"], "throttled.STORAGE_LOAD")
			assert.Positive(t, got.RetriesAfterThrottle, "retries_after_throttle")
			assert.Positive(t, got.RetriesAfterFailure, "retries_after_failure")
			assert.Positive(t, got.RetriesAfterFailureByCode[tc.failure], "retries_after_failure_by_code[%s]", tc.failure)
			assert.Equal(t, got.RetriesAfterFailure,
				got.RetriesAfterFailureByKind["failed-not-stored"]+got.RetriesAfterFailureByKind["failed-unknown"],
				"retries_after_failure_by_kind adds up")
			assert.True(t, got.LatencyMS["p50"] <= got.LatencyMS["p99"] && got.LatencyMS["p99"] <= got.LatencyMS["max"] && got.LatencyMS["max"] > 0,
				"latency_ms = %v; want ordered, max > 0", got.LatencyMS)
			assert.Positive(t, got.ElapsedSeconds, "elapsed_seconds")
			assert.Equal(t, tc.wire, got.Config.Protocol, "config.protocol")
			// Every 10th of the 1,000 SendAsync messages is in one of 4
			// groups: each group stored in send order through the
			// throttling, the faults and the restart.
			require.NotNil(t, got.FIFO, "fifo")
			assert.Equal(t, 4, got.FIFO.Groups, "fifo.groups")
			assert.Equal(t, 100, got.FIFO.Sent, "fifo.sent")
			assert.Zero(t, got.FIFO.OutOfOrder, "fifo.out_of_order")
			assert.GreaterOrEqual(t, got.FIFO.Stored+got.DeadLettered, got.FIFO.Sent, "fifo stored in order, or dead-lettered")
		})
	}
}

// deref is *p, or -1 when the field was missing.
func deref(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}

// okLine is the demo's verdict when nothing was lost: nothing stored twice,
// or (apache.rocketmq.v2, no deduplication) copies no more than the unknown
// outcomes the producer met.
var okLine = regexp.MustCompile(`OK: nothing lost, (nothing stored twice|[\d,]+ cop(y|ies) stored, no more than the [\d,]+ unknown outcomes? the producer met)`)

func TestDemoText(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var out, errb bytes.Buffer
	// Later flags win: a short run without the backtrack and the restart.
	args := append(append([]string{"demo"}, smallDemo...), "--messages", "300", "--reset-at", "0", "--restart-at", "0")
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("run(demo --messages 300 ...) = %d; want 0\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{
		"rocketry demo: 300 messages", "speaks apache.rocketmq.v2 to the broker (--protocol rocketmq)", "after 42900", "dead letters",
		"messages sent", "stored", "dead-lettered", "lost", "stored twice",
		"attempts per message", "throttled (42900) BACKLOG", "throttled (42900) STORAGE_LOAD",
		"retries after failures", "latency p50", "latency p99", "latency max", "elapsed",
		"no deduplication by ID", "OK: nothing lost, ",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo text output lacks %q:\n%s", want, out.String())
		}
	}
	assert.Regexp(t, okLine, out.String())
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
		{[]string{"--protocol", "kafka"}, "--protocol"},
		{[]string{"--pacing=maybe"}, "pacing"},
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
	for _, want := range []string{"-messages", "-json", "-seed", "-time-scale", "-internal-rate", "-max-backlog",
		"-protocol", "RocketMQ 5", "production", "-pacing"} {
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

func TestDemoFailureLabel(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{&producer.RocketMQStatusError{Code: 50001, Message: "injected"}, "INTERNAL_SERVER_ERROR"},
		{&producer.RocketMQStatusError{Code: 42900}, "TOO_MANY_REQUESTS"},
		{status.Error(codes.Internal, "boom"), "INTERNAL"},
		{status.Error(codes.Unavailable, "restart"), "UNAVAILABLE"},
		{status.Error(codes.DeadlineExceeded, "slow"), "DEADLINE_EXCEEDED"},
		{&producer.SendError{Cause: &producer.RocketMQStatusError{Code: 50001}}, "INTERNAL_SERVER_ERROR"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, failureLabel(tt.err), "failureLabel(%v)", tt.err)
	}
}

func TestDemoSendErrorKind(t *testing.T) {
	// The kind leaves out the message ID, so that sends count together.
	a := &producer.SendError{MessageID: "demo-1", Attempts: 3, Last: producer.FailedUnknown, DeadLettered: true,
		Cause: &producer.RocketMQStatusError{Code: 50001, Message: "injected"}}
	b := &producer.SendError{MessageID: "demo-2", Attempts: 3, Last: producer.FailedUnknown, DeadLettered: true,
		Cause: &producer.RocketMQStatusError{Code: 50001, Message: "other text"}}
	assert.Equal(t, sendErrorKind(a), sendErrorKind(b))
	assert.Equal(t, "failed after 3 attempts, the last failed-unknown (INTERNAL_SERVER_ERROR), spooled", sendErrorKind(a))
	assert.Equal(t, "context deadline exceeded", sendErrorKind(context.DeadlineExceeded))
}
