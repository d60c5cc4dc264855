package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// withStdin makes the produce command read in, as if piped, for one test.
func withStdin(t *testing.T, in string, terminal bool) {
	t.Helper()
	oldIn, oldTerm := produceStdin, stdinIsTerminal
	produceStdin = strings.NewReader(in)
	stdinIsTerminal = func() bool { return terminal }
	t.Cleanup(func() { produceStdin, stdinIsTerminal = oldIn, oldTerm })
}

func produceJSON(t *testing.T, args ...string) (produceSummary, int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"produce", "--json"}, args...), &out, &errb)
	var sum produceSummary
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		t.Fatalf("run(produce --json %v): output %q is not JSON: %v (stderr %q)", args, out.String(), err, errb.String())
	}
	return sum, code, errb.String()
}

func TestProduce(t *testing.T) {
	leakCheck(t)
	withStdin(t, "", true)
	policy := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(policy, []byte(`{"healthyRetryPolicy": {"minDelayTarget": 1, "maxDelayTarget": 2, "numRetries": 3,
		"numNoDelayRetries": 0, "numMinDelayRetries": 1, "numMaxDelayRetries": 1, "backoffFunction": "linear"},
		"throttlePolicy": {"maxReceivesPerSecond": 10000}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	oldGetenv := getenv
	getenv = func(k string) string { return map[string]string{secretKeyEnv: "s3cret"}[k] }
	t.Cleanup(func() { getenv = oldGetenv })
	tests := []struct {
		name   string
		args   []string
		count  int
		stderr string // the one line a delivery policy prints
	}{
		{"sync", []string{"--protocol", "rocketry", "--count", "50", "--size", "16"}, 50, ""},
		{"async", []string{"--protocol", "rocketry", "--count", "300", "--async", "--in-flight", "8"}, 300, ""},
		{"rate", []string{"--protocol", "rocketry", "--count", "5", "--rate", "2000", "--size", "0"}, 5, ""},
		{"preset", []string{"--protocol", "rocketry", "--count", "10", "--throttle-policy", "customer-managed", "--async"}, 10,
			"rocketry produce: throttle schedule customer-managed: 50 retries, so up to 51 attempts per message (set --max-attempts to cap it)\n"},
		{"policy file", []string{"--protocol", "rocketry", "--count", "10", "--throttle-policy", policy}, 10,
			"rocketry produce: throttle schedule " + policy + ": 3 retries, so up to 4 attempts per message (set --max-attempts to cap it); " +
				"attempts limited to 10000 per second (its maxReceivesPerSecond)\n"},
		{"rocketmq (the default)", []string{"--count", "40"}, 40, ""},
		{"rocketmq async", []string{"--count", "40", "--async"}, 40, ""},
		{"rocketmq signed", []string{"--count", "5", "--protocol", "rocketmq", "--access-key", "ak", "--namespace", "ns-1"}, 5, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := brokertest.Start(t)
			sum, code, stderr := produceJSON(t, append([]string{"--addr", b.Addr(), "--topic", "t"}, tt.args...)...)
			n := int64(tt.count)
			if code != 0 || stderr != tt.stderr || sum.Sent != n || sum.Stored != n || sum.Failed != 0 || sum.Attempts != n || sum.Elapsed <= 0 {
				t.Fatalf("produce %v = %d, %+v, stderr %q; want 0, %d sent, stored and attempts, stderr %q", tt.args, code, sum, stderr, n, tt.stderr)
			}
			if got := len(storedIDs(b, "t")); got != tt.count {
				t.Fatalf("broker holds %d distinct messages; want %d", got, tt.count)
			}
		})
	}
}

func TestProduceStdin(t *testing.T) {
	leakCheck(t)
	withStdin(t, "alpha\nbeta\r\ngamma", false)
	b := brokertest.Start(t)
	var out, errb bytes.Buffer
	if code := run([]string{"produce", "--addr", b.Addr(), "--topic", "lines", "--tag", "x"}, &out, &errb); code != 0 {
		t.Fatalf("produce(stdin) = %d, stderr %q; want 0", code, errb.String())
	}
	if !strings.Contains(out.String(), "sent 3, stored 3 (0 duplicates), failed 0 (0 spooled), 3 attempts") {
		t.Errorf("produce(stdin) printed %q; want the summary of 3 stored", out.String())
	}
	var bodies []string
	for _, m := range b.Messages("lines") {
		bodies = append(bodies, string(m.GetMessage().GetBody()))
		if tag := m.GetMessage().GetTag(); tag != "x" {
			t.Errorf("stored tag %q; want x", tag)
		}
	}
	sort.Strings(bodies)
	if want := []string{"alpha", "beta", "gamma"}; strings.Join(bodies, ",") != strings.Join(want, ",") {
		t.Errorf("stored bodies %q; want %q", bodies, want)
	}
}

// TestProduceSpoolThenReplay sends to a broker that refuses everything with
// a spool, then replays the spool once the broker is healthy: every message
// ends up stored once.
func TestProduceSpoolThenReplay(t *testing.T) {
	leakCheck(t)
	withStdin(t, "", true)
	b := brokertest.Start(t, broker.WithFaults(broker.Faults{Unavailable: true}))
	spool := filepath.Join(t.TempDir(), "dead.spool")
	for _, mode := range []string{"--async=false", "--async"} {
		sum, code, stderr := produceJSON(t, "--protocol", "rocketry", "--addr", b.Addr(), "--topic", "t", "--count", "20", mode,
			"--max-attempts", "2", "--spool", spool)
		if code != 1 || sum.Sent != 20 || sum.Failed != 20 || sum.Spooled != 20 || sum.Attempts != 40 || !strings.Contains(stderr, "rocketry produce:") {
			t.Fatalf("produce %s to an unavailable broker = %d, %+v, stderr %q; want 1, 20 failed and spooled, 40 attempts", mode, code, sum, stderr)
		}
	}
	b.SetFaults(broker.Faults{})
	sum, code, stderr := replayJSON(t, "--protocol", "rocketry", "--spool", spool, "--addr", b.Addr())
	if code != 0 || sum.Read != 40 || sum.Stored != 40 {
		t.Fatalf("replay = %d, %+v, %q; want 0, 40 stored", code, sum, stderr)
	}
	seen := storedIDs(b, "t")
	if len(seen) != 40 {
		t.Fatalf("broker holds %d distinct messages; want 40", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("broker holds %s %d times; want 1", id, n)
		}
	}
}

// TestProducePolicyAttempts pins what the policy line says against what the
// producer does: a policy of 3 retries makes 4 attempts without
// --max-attempts, and --max-attempts wins when given.
func TestProducePolicyAttempts(t *testing.T) {
	leakCheck(t)
	withStdin(t, "", true)
	policy := filepath.Join(t.TempDir(), "policy.json")
	require.NoError(t, os.WriteFile(policy, []byte(`{"healthyRetryPolicy": {"minDelayTarget": 1, "maxDelayTarget": 2,
		"numRetries": 3, "numNoDelayRetries": 3}}`), 0o600))
	b := brokertest.Start(t, broker.WithFaults(broker.Faults{Unavailable: true}))
	tests := []struct {
		extra    []string
		attempts int64
		line     string
	}{
		{nil, 4, "3 retries, so up to 4 attempts per message (set --max-attempts to cap it)"},
		{[]string{"--max-attempts", "2"}, 2, "3 retries, but --max-attempts 2 allows 1: the policy's last 2 retries are not reached"},
		{[]string{"--max-attempts", "6"}, 6, "3 retries after throttling, within --max-attempts 6 (which also counts the retries after failures)"},
	}
	for _, tt := range tests {
		args := append([]string{"--addr", b.Addr(), "--topic", "t", "--count", "1", "--throttle-policy", policy}, tt.extra...)
		sum, code, stderr := produceJSON(t, args...)
		assert.Equal(t, 1, code, "produce %v to an unavailable broker", args)
		assert.Equal(t, tt.attempts, sum.Attempts, "produce %v: attempts", args)
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		require.Len(t, lines, 2, "produce %v: stderr %q; want the policy line and the failure", args, stderr)
		assert.Equal(t, "rocketry produce: throttle schedule "+policy+": "+tt.line, lines[0])
	}
}

// TestProduceRocketMQUnreachable: RocketMQ 5's New waits for the proxy's
// Settings, so an address where nothing answers is a failure of the run
// (exit 1), named by --addr, not a usage error.
func TestProduceRocketMQUnreachable(t *testing.T) {
	leakCheck(t)
	withStdin(t, "", true)
	dead := deadAddress(t)
	var out, errb bytes.Buffer
	code := run([]string{"produce", "--protocol", "rocketmq", "--addr", dead, "--topic", "t", "--count", "1", "--attempt-timeout", "200ms"}, &out, &errb)
	assert.Equal(t, 1, code)
	assert.Equal(t, 1, strings.Count(errb.String(), "\n"), "stderr %q: one line", errb.String())
	assert.True(t, strings.HasPrefix(errb.String(), "rocketry produce: --addr "+dead+": "), "stderr %q names --addr", errb.String())
	assert.Empty(t, out.String())
}

func TestProducePolicyNotice(t *testing.T) {
	aws, err := backoff.Preset("aws-managed")
	require.NoError(t, err)
	tests := []struct {
		maxAttempts int // 0: not given
		want        string
	}{
		{0, "throttle schedule aws-managed: 100,015 retries, so up to 100,016 attempts per message (set --max-attempts to cap it)"},
		{5, "throttle schedule aws-managed: 100,015 retries, but --max-attempts 5 allows 4: the policy's last 100,011 retries are not reached"},
		{100_015, "throttle schedule aws-managed: 100,015 retries, but --max-attempts 100,015 allows 100,014: the policy's last retry is not reached"},
		{100_016, "throttle schedule aws-managed: 100,015 retries after throttling, within --max-attempts 100,016 (which also counts the retries after failures)"},
	}
	for _, tt := range tests {
		c := produceConfig{throttlePolicy: "aws-managed", maxAttempts: 3, set: map[string]bool{}}
		if tt.maxAttempts > 0 {
			c.maxAttempts, c.set["max-attempts"] = tt.maxAttempts, true
		}
		assert.Equal(t, tt.want, c.policyNotice(aws), "policyNotice with --max-attempts %d", tt.maxAttempts)
	}
}

// TestProduceGroupAndTimed: --group sends every line in one message group,
// stored on one queue in line order, over both protocols and async;
// --deliver-after makes timed messages, held by the broker.
func TestProduceGroupAndTimed(t *testing.T) {
	leakCheck(t)
	var lines []string
	for i := range 40 {
		lines = append(lines, fmt.Sprintf("line-%02d", i))
	}
	for _, proto := range []string{"rocketry", "rocketmq"} {
		t.Run(proto, func(t *testing.T) {
			b := brokertest.Start(t, broker.WithQueues(4))
			withStdin(t, strings.Join(lines, "\n")+"\n", false)
			sum, code, stderr := produceJSON(t, "--addr", b.Addr(), "--topic", "t", "--protocol", proto, "--async", "--group", "g1")
			if code != 0 || sum.Stored != int64(len(lines)) {
				t.Fatalf("produce --group = %d, %+v, stderr %q; want 0 and %d stored", code, sum, stderr, len(lines))
			}
			ms := b.Messages("t")
			slices.SortFunc(ms, func(x, y *rocketryv1.ReceivedMessage) int { return cmp.Compare(x.GetOffset(), y.GetOffset()) })
			var got []string
			for _, m := range ms {
				if m.GetQueueId() != ms[0].GetQueueId() || m.GetMessage().GetMessageGroup() != "g1" {
					t.Fatalf("message %q on queue %d, group %q; want every message on one queue, group g1", m.GetMessage().GetBody(), m.GetQueueId(), m.GetMessage().GetMessageGroup())
				}
				got = append(got, string(m.GetMessage().GetBody()))
			}
			if !slices.Equal(got, lines) {
				t.Fatalf("stored %q; want the lines in order", got)
			}

			withStdin(t, "later\n", false)
			sum, code, stderr = produceJSON(t, "--addr", b.Addr(), "--topic", "timed", "--protocol", proto, "--deliver-after", "1h")
			if code != 0 || sum.Stored != 1 {
				t.Fatalf("produce --deliver-after = %d, %+v, stderr %q; want 0 and 1 stored", code, sum, stderr)
			}
			if ms := b.Messages("timed"); len(ms) != 1 || ms[0].GetOffset() != -1 || ms[0].GetMessage().GetDeliveryTime() == nil {
				t.Fatalf("broker holds %v; want one timed message, not yet in its queue", ms)
			}
		})
	}
}

func TestProduceBadFlags(t *testing.T) {
	oldGetenv := getenv
	getenv = func(string) string { return "" }
	t.Cleanup(func() { getenv = oldGetenv })
	dir := t.TempDir()
	badPolicy := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(badPolicy, []byte(`{"healthyRetryPolicy": {"numRetries": -1}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ok := []string{"--addr", "127.0.0.1:1", "--topic", "t", "--count", "1"}
	with := func(extra ...string) []string { return append(append([]string{}, ok...), extra...) }
	tests := []struct {
		name     string
		args     []string
		terminal bool
		want     string // in the one line on stderr
	}{
		{"empty addr", []string{"--addr", "", "--topic", "t", "--count", "1"}, false, "--addr is required"},
		{"no topic", []string{"--addr", "a:1", "--count", "1"}, false, "--topic is required"},
		{"unknown flag", with("--bogus"), false, "-bogus"},
		{"count negative", with("--count", "-1"), false, "--count -1"},
		{"count text", with("--count", "ten"), false, "-count"},
		{"terminal without count", []string{"--addr", "a:1", "--topic", "t"}, true, "--count"},
		{"size negative", with("--size", "-1"), false, "--size -1"},
		{"size too large", with("--size", "4194305"), false, "--size 4194305"},
		{"size without count", []string{"--addr", "a:1", "--topic", "t", "--size", "10"}, false, "--size"},
		{"rate negative", with("--rate", "-1"), false, "--rate -1"},
		{"rate NaN", with("--rate", "NaN"), false, "--rate NaN"},
		{"rate infinite", with("--rate", "+Inf"), false, "--rate +Inf"},
		{"in-flight zero", with("--async", "--in-flight", "0"), false, "--in-flight 0"},
		{"in-flight without async", with("--in-flight", "4"), false, "--in-flight"},
		{"max attempts zero", with("--max-attempts", "0"), false, "--max-attempts 0"},
		{"attempt timeout zero", with("--attempt-timeout", "0s"), false, "--attempt-timeout 0s"},
		{"attempt timeout text", with("--attempt-timeout", "later"), false, "-attempt-timeout"},
		{"timeout negative", with("--timeout", "-5s"), false, "--timeout -5s"},
		{"policy empty", with("--throttle-policy", ""), false, "--throttle-policy"},
		{"policy unknown", with("--throttle-policy", filepath.Join(dir, "missing.json")), false, "--throttle-policy"},
		{"policy invalid", with("--throttle-policy", badPolicy), false, "--throttle-policy"},
		{"spool in a missing dir", with("--spool", filepath.Join(dir, "no", "such", "spool")), false, "--spool"},
		{"bad addr", []string{"--addr", ",", "--topic", "t", "--count", "1"}, false, "--addr"},
		{"protocol unknown", with("--protocol", "kafka"), false, `--protocol "kafka"`},
		{"access key on rocketry", with("--protocol", "rocketry", "--access-key", "ak"), false, "--access-key: only with --protocol rocketmq"},
		{"ca unreadable", with("--ca", "/no/such/ca.pem"), false, "--ca /no/such/ca.pem"},
		{"namespace on rocketry", with("--protocol", "rocketry", "--namespace", "ns"), false, "--namespace: only with --protocol rocketmq"},
		{"access key without secret", with("--protocol", "rocketmq", "--access-key", "ak"), false, "ROCKETRY_SECRET_KEY"},
		{"secret without access key", with("--protocol", "rocketmq", "--secret-key", "s"), false, "--secret-key: only with --access-key"},
		{"bad namespace", with("--protocol", "rocketmq", "--namespace", "no spaces"), false, `--namespace "no spaces": must be`},
		{"access key not ASCII", with("--protocol", "rocketmq", "--access-key", "é", "--secret-key", "s"), false, "--access-key é: must be printable ASCII"},
		{"spool is a directory", with("--spool", dir), false, "--spool " + dir + ": "},
		{"extra argument", with("now"), false, `unexpected argument "now"`},
		{"blank group", with("--group", "  "), false, `--group "  ": must not be blank`},
		{"long group", with("--group", strings.Repeat("g", 64)), false, "--group: 64 bytes; the most is 63"},
		{"deliver after too far", with("--deliver-after", "25h"), false, "--deliver-after 25h0m0s: must be in 0..24h0m0s"},
		{"deliver after negative", with("--deliver-after", "-1s"), false, "--deliver-after -1s"},
		{"group and deliver after", with("--group", "g", "--deliver-after", "1s"), false, "--group and --deliver-after"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			withStdin(t, "", tt.terminal)
			var out, errb bytes.Buffer
			code := run(append([]string{"produce"}, tt.args...), &out, &errb)
			lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
			if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], tt.want) {
				t.Errorf("run(produce %v) = %d, stderr %q; want 2 and one line containing %q", tt.args, code, errb.String(), tt.want)
			}
		})
	}
	var out, errb bytes.Buffer
	if code := run([]string{"produce", "--help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "-throttle-policy") {
		t.Errorf("run(produce --help) = %d, %q; want 0 and the flags", code, out.String())
	}
}
