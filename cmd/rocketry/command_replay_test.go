package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/rocketry-go/rocketry/brokercode"
	"github.com/rocketry-go/rocketry/producer"
	"github.com/rocketry-go/rocketry/producer/deadletter"
)

// leakCheck checks for leaked goroutines after every cleanup of t (it runs
// last, so brokers started later are stopped first).
func leakCheck(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// writeSpool writes n messages (ids m-0.., topic "orders") to a new
// dead-letter store, each pinned to maybeAt (empty: none).
func writeSpool(t *testing.T, n int, maybeAt ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dead.db")
	s, err := deadletter.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		m := &producer.Message{ID: fmt.Sprintf("m-%d", i), Topic: "orders", Body: []byte(fmt.Sprintf("body %d", i))}
		d := &producer.DeadLetter{Message: m, Err: "unavailable", Attempts: 3, Code: brokercode.Unavailable, DeadLetteredAt: time.Now()}
		if len(maybeAt) > 0 {
			d.MaybeStoredAt = maybeAt[0]
		}
		if err := s.Put(d); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// storeLen counts the records of the store at path.
func storeLen(t *testing.T, path string) int {
	t.Helper()
	s, err := deadletter.Open(path, deadletter.WithReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n, err := s.Len()
	if err != nil {
		t.Fatal(err)
	}
	return n
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
	if sum, code, stderr := replayJSON(t, "--protocol", "rocketry", "--spool", pre, "--addr", b.Addr()); code != 0 || sum.Stored != 1 {
		t.Fatalf("replay(one message) = %d, %+v, %q; want 0, 1 stored", code, sum, stderr)
	}

	sum, code, stderr := replayJSON(t, "--protocol", "rocketry", "--spool", path, "--addr", b.Addr())
	want := replaySummary{Spool: path, Read: n, Stored: n, Duplicates: 1}
	if code != 0 || sum != want || stderr != "" {
		t.Fatalf("replay = %d, %+v, stderr %q; want 0, %+v, nothing", code, sum, stderr, want)
	}
	// Replaying again finds nothing to send.
	sum, code, _ = replayJSON(t, "--protocol", "rocketry", "--spool", path, "--addr", b.Addr())
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
	if code := run([]string{"replay", "--protocol", "rocketry", "--spool", path, "--addr", b.Addr()}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "read 0, stored 0 (0 already stored), failed 0") {
		t.Errorf("replay (text) = %d, %q; want 0 and a summary line", code, out.String())
	}
}

// TestReplayRocketMQ replays a spool over apache.rocketmq.v2: the bundled
// broker serves it on the same port and, as a RocketMQ broker, does not
// deduplicate: m-0, stored before on rocketry.v1, is stored again, a copy
// its stats count.
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
		want := 1
		if i == 0 {
			want = 2
		}
		assert.Equal(t, want, seen[fmt.Sprintf("m-%d", i)], "broker holds m-%d", i)
	}
	assert.Equal(t, int64(1), b.Stats().GetCopies(), "copies")
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
		if n := storeLen(t, path); n != 3 {
			t.Fatalf("store after a failed replay: %d records; want all 3 kept", n)
		}
	})

	t.Run("corrupt record", func(t *testing.T) {
		b := brokertest.Start(t)
		path := writeSpool(t, 2)
		db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		err = db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("records")).Put([]byte("m-1x"), []byte("\xffnot a record"))
		})
		if cerr := db.Close(); err != nil || cerr != nil {
			t.Fatal(err, cerr)
		}
		sum, code, stderr := replayJSON(t, "--spool", path, "--addr", b.Addr())
		if code != 1 || sum.Read != 3 || sum.Stored != 2 || !sum.Corrupt {
			t.Fatalf("replay(a corrupt record) = %d, %+v, stderr %q; want 1, 2 stored, corrupt", code, sum, stderr)
		}
		if seen := storedIDs(b, "orders"); len(seen) != 2 || seen["m-0"] != 1 || seen["m-1"] != 1 {
			t.Fatalf("broker holds %v; want m-0 and m-1 once", seen)
		}
		if n := storeLen(t, path); n != 1 {
			t.Fatalf("store after the replay: %d records; want the corrupt one kept", n)
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
	// The store is opened before the producer is made (and a RocketMQ 5
	// producer dials): the options New refuses need one that opens.
	store := filepath.Join(t.TempDir(), "dead.db")
	s, err := deadletter.Open(store)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
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
		{"negative max throttled", []string{"--spool", "x", "--addr", "a:1", "--max-throttled", "-1"}, "--max-throttled -1"},
		{"extra argument", []string{"--spool", "x", "--addr", "a:1", "extra"}, `unexpected argument "extra"`},
		{"bad addr", []string{"--spool", "x", "--addr", ",,"}, "--addr"},
		{"protocol unknown", []string{"--spool", "x", "--addr", "a:1", "--protocol", "v3"}, `--protocol "v3"`},
		{"ca unreadable", []string{"--spool", "x", "--addr", "a:1", "--ca", "/no/such/ca.pem"}, "--ca /no/such/ca.pem"},
		{"bad namespace", []string{"--spool", store, "--addr", "a:1", "--protocol", "rocketmq", "--namespace", "a/b"}, `--namespace "a/b"`},
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

// TestReplayToSeveralBrokersStaysWhereStored is the regression test of
// issue 13's first item: `rocketry replay --addr a,b` spread first
// attempts round robin, and a spool record did not say which broker had the
// unknown outcome, so a message already stored on a was stored again on b
// (10 of 20 in the report). A record now keeps that endpoint, and the
// replay sends it there only.
func TestReplayToSeveralBrokersStaysWhereStored(t *testing.T) {
	leakCheck(t)
	const n = 20
	a, b := brokertest.Start(t), brokertest.Start(t)
	// a stored the messages, but their senders never heard: they were
	// dead-lettered with a as the endpoint of the unknown outcome.
	_, code, stderr := replayJSON(t, "--protocol", "rocketry", "--spool", writeSpool(t, n), "--addr", a.Addr())
	require.Equal(t, 0, code, "stderr %q", stderr)

	path := writeSpool(t, n, a.Addr())
	sum, code, stderr := replayJSON(t, "--protocol", "rocketry", "--spool", path, "--addr", a.Addr()+","+b.Addr())
	require.Equal(t, 0, code, "stderr %q", stderr)
	assert.Equal(t, replaySummary{Spool: path, Read: n, Stored: n, Duplicates: n}, sum)
	onA, onB := storedIDs(a, "orders"), storedIDs(b, "orders")
	twice := 0
	for i := range n {
		id := fmt.Sprintf("m-%d", i)
		assert.Equal(t, 1, onA[id], "broker a holds %s", id)
		if onB[id] > 0 {
			twice++
		}
	}
	assert.Zero(t, twice, "messages stored on both brokers")
	assert.Zero(t, storeLen(t, path), "records left in the store")
}

// TestReplayPinnedToAnotherBroker: a record that may be stored on a broker
// the replay is not given is kept, with an error naming that broker; no
// other broker gets it.
func TestReplayPinnedToAnotherBroker(t *testing.T) {
	leakCheck(t)
	b := brokertest.Start(t)
	path := writeSpool(t, 3, "127.0.0.1:9") // nothing listens there
	sum, code, stderr := replayJSON(t, "--spool", path, "--addr", b.Addr())
	assert.Equal(t, 1, code)
	assert.Equal(t, replaySummary{Spool: path, Read: 3, Failed: 3, Error: sum.Error}, sum)
	assert.Contains(t, stderr, `endpoint "127.0.0.1:9"`)
	assert.Empty(t, storedIDs(b, "orders"))
	assert.Equal(t, 3, storeLen(t, path))

	// The caller may accept another broker.
	sum, code, stderr = replayJSON(t, "--spool", path, "--addr", b.Addr(), "--failover-unknown")
	assert.Equal(t, 0, code, "stderr %q", stderr)
	assert.Equal(t, 3, sum.Stored)
	assert.Len(t, storedIDs(b, "orders"), 3)
}

// TestReplayStopsWhenThrottled: with --max-throttled, a replay to a broker
// that keeps throttling stops early with exit 1, and what it did not store
// stays in the store for the next replay, which finishes the job.
func TestReplayStopsWhenThrottled(t *testing.T) {
	leakCheck(t)
	// One message per 100 s: the first is stored, the others throttled
	// (SEND_RATE).
	b := brokertest.Start(t, broker.WithThrottle(broker.Throttle{MaxSendRate: 0.01}))
	path := writeSpool(t, 10)
	sum, code, stderr := replayJSON(t, "--spool", path, "--addr", b.Addr(), "--max-attempts", "1", "--max-throttled", "3")
	assert.Equal(t, 1, code)
	assert.Equal(t, replaySummary{Spool: path, Read: 4, Stored: 1, Failed: 3, Left: 6, Error: sum.Error}, sum)
	assert.Contains(t, stderr, "keeps throttling")
	assert.Equal(t, 9, storeLen(t, path))

	require.NoError(t, b.SetThrottle(broker.Throttle{}))
	sum, code, stderr = replayJSON(t, "--spool", path, "--addr", b.Addr())
	assert.Equal(t, 0, code, "stderr %q", stderr)
	assert.Equal(t, 9, sum.Stored)
	assert.Zero(t, storeLen(t, path))
	assert.Len(t, storedIDs(b, "orders"), 10)
}
