package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/producer"
)

// leakCheck checks for leaked goroutines after every cleanup of t (it runs
// last, so brokers started later are stopped first).
func leakCheck(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// writeSpool writes n messages (ids m-0.., topic "orders") to a new spool.
func writeSpool(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dead.spool")
	s, err := producer.OpenSpool(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		m := &producer.Message{ID: fmt.Sprintf("m-%d", i), Topic: "orders", Body: []byte(fmt.Sprintf("body %d", i))}
		if err := s.Append(producer.SpoolRecord{Message: m, Err: "unavailable", Attempts: 3, Code: rocketryv1.Code_CODE_UNAVAILABLE}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// storedIDs counts the broker's stored messages of topic by id.
func storedIDs(b *broker.Broker, topic string) map[string]int {
	seen := map[string]int{}
	for _, m := range b.Messages(topic) {
		seen[m.GetMessage().GetMessageId()]++
	}
	return seen
}

func replayJSON(t *testing.T, args ...string) (replaySummary, int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"replay", "--json"}, args...), &out, &errb)
	var sum replaySummary
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		t.Fatalf("run(replay --json %v): output %q is not JSON: %v (stderr %q)", args, out.String(), err, errb.String())
	}
	return sum, code, errb.String()
}

func TestReplay(t *testing.T) {
	leakCheck(t)
	const n = 10
	path := writeSpool(t, n)
	b := brokertest.Start(t)
	// The broker already holds m-0, as after a lost answer.
	pre := writeSpool(t, 1)
	if sum, code, stderr := replayJSON(t, "--spool", pre, "--addr", b.Addr()); code != 0 || sum.Stored != 1 {
		t.Fatalf("replay(one message) = %d, %+v, %q; want 0, 1 stored", code, sum, stderr)
	}

	sum, code, stderr := replayJSON(t, "--spool", path, "--addr", b.Addr())
	want := replaySummary{Spool: path, Read: n, Stored: n, Duplicates: 1}
	if code != 0 || sum != want || stderr != "" {
		t.Fatalf("replay = %d, %+v, stderr %q; want 0, %+v, nothing", code, sum, stderr, want)
	}
	// Replaying again finds nothing to send.
	sum, code, _ = replayJSON(t, "--spool", path, "--addr", b.Addr())
	if want := (replaySummary{Spool: path}); code != 0 || sum != want {
		t.Fatalf("second replay = %d, %+v; want 0, %+v", code, sum, want)
	}
	seen := storedIDs(b, "orders")
	for i := range n {
		if c := seen[fmt.Sprintf("m-%d", i)]; c != 1 {
			t.Errorf("broker holds m-%d %d times; want 1", i, c)
		}
	}

	// The text summary.
	var out, errb bytes.Buffer
	if code := run([]string{"replay", "--spool", path, "--addr", b.Addr()}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "read 0, stored 0 (0 already stored), failed 0") {
		t.Errorf("replay (text) = %d, %q; want 0 and a summary line", code, out.String())
	}
}

// TestReplayRocketMQ replays a spool over apache.rocketmq.v2: the bundled
// broker serves it on the same port and deduplicates across protocols.
func TestReplayRocketMQ(t *testing.T) {
	leakCheck(t)
	path := writeSpool(t, 5)
	b := brokertest.Start(t)
	pre := writeSpool(t, 1) // m-0, stored before on rocketry.v1
	_, code, _ := replayJSON(t, "--spool", pre, "--addr", b.Addr())
	require.Equal(t, 0, code)

	sum, code, stderr := replayJSON(t, "--spool", path, "--addr", b.Addr(), "--protocol", "rocketmq", "--namespace", "ns-1")
	assert.Equal(t, 0, code, "stderr %q", stderr)
	// A RocketMQ 5 answer does not say "duplicate": m-0 counts as stored.
	assert.Equal(t, replaySummary{Spool: path, Read: 5, Stored: 5}, sum)
	seen := storedIDs(b, "orders")
	for i := range 5 {
		assert.Equal(t, 1, seen[fmt.Sprintf("m-%d", i)], "broker holds m-%d", i)
	}
}

func TestReplayFailures(t *testing.T) {
	leakCheck(t)
	b := brokertest.Start(t, broker.WithFaults(broker.Faults{Unavailable: true}))

	t.Run("broker unavailable", func(t *testing.T) {
		path := writeSpool(t, 3)
		sum, code, stderr := replayJSON(t, "--spool", path, "--addr", b.Addr(), "--max-attempts", "2", "--attempt-timeout", "1s")
		if code != 1 || sum.Read != 3 || sum.Failed != 3 || sum.Stored != 0 || !strings.Contains(stderr, "m-0") {
			t.Fatalf("replay = %d, %+v, stderr %q; want 1, 3 failed, an error naming m-0", code, sum, stderr)
		}
		if recs, err := producer.ReadSpool(path); err != nil || len(recs) != 3 {
			t.Fatalf("spool after a failed replay: %d records, %v; want all 3 kept", len(recs), err)
		}
	})

	t.Run("corrupt spool", func(t *testing.T) {
		b := brokertest.Start(t)
		path := writeSpool(t, 3)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data[:len(data)-4], 0o600); err != nil { // torn tail
			t.Fatal(err)
		}
		sum, code, stderr := replayJSON(t, "--spool", path, "--addr", b.Addr())
		if code != 1 || sum.Read != 2 || sum.Stored != 2 || !sum.Corrupt || !strings.Contains(stderr, "corrupt") {
			t.Fatalf("replay(torn spool) = %d, %+v, stderr %q; want 1, 2 stored, corrupt", code, sum, stderr)
		}
		if seen := storedIDs(b, "orders"); len(seen) != 2 || seen["m-0"] != 1 || seen["m-1"] != 1 {
			t.Fatalf("broker holds %v; want m-0 and m-1 once", seen)
		}
	})

	t.Run("missing spool", func(t *testing.T) {
		sum, code, stderr := replayJSON(t, "--spool", filepath.Join(t.TempDir(), "none"), "--addr", b.Addr())
		if code != 1 || sum.Read != 0 || !strings.Contains(stderr, "no such file") {
			t.Fatalf("replay(missing spool) = %d, %+v, %q; want 1 and no such file", code, sum, stderr)
		}
	})
}

func TestReplayBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // in the one line on stderr
	}{
		{"no spool", []string{"--addr", "127.0.0.1:1"}, "--spool is required"},
		{"empty addr", []string{"--spool", "x", "--addr", ""}, "--addr is required"},
		{"unknown flag", []string{"--spool", "x", "--addr", "a:1", "--nope"}, "-nope"},
		{"max attempts 0", []string{"--spool", "x", "--addr", "a:1", "--max-attempts", "0"}, "--max-attempts 0"},
		{"max attempts text", []string{"--spool", "x", "--addr", "a:1", "--max-attempts", "many"}, "-max-attempts"},
		{"attempt timeout 0", []string{"--spool", "x", "--addr", "a:1", "--attempt-timeout", "0s"}, "--attempt-timeout 0s"},
		{"attempt timeout bad", []string{"--spool", "x", "--addr", "a:1", "--attempt-timeout", "soon"}, "-attempt-timeout"},
		{"negative timeout", []string{"--spool", "x", "--addr", "a:1", "--timeout", "-1s"}, "--timeout -1s"},
		{"extra argument", []string{"--spool", "x", "--addr", "a:1", "extra"}, `unexpected argument "extra"`},
		{"bad addr", []string{"--spool", "x", "--addr", ",,"}, "--addr"},
		{"protocol unknown", []string{"--spool", "x", "--addr", "a:1", "--protocol", "v3"}, `--protocol "v3"`},
		{"ca unreadable", []string{"--spool", "x", "--addr", "a:1", "--ca", "/no/such/ca.pem"}, "--ca /no/such/ca.pem"},
		{"bad namespace", []string{"--spool", "x", "--addr", "a:1", "--protocol", "rocketmq", "--namespace", "a/b"}, `--namespace "a/b"`},
		{"secret without access key", []string{"--spool", "x", "--addr", "a:1", "--protocol", "rocketmq", "--secret-key", "s"}, "--secret-key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(append([]string{"replay"}, tt.args...), &out, &errb)
			lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
			if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], tt.want) {
				t.Errorf("run(replay %v) = %d, stderr %q; want 2 and one line containing %q", tt.args, code, errb.String(), tt.want)
			}
		})
	}
	var out, errb bytes.Buffer
	if code := run([]string{"replay", "-h"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "-spool") {
		t.Errorf("run(replay -h) = %d, %q; want 0 and the flags", code, out.String())
	}
}
