package interop_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		removeGoProduce()
		os.Exit(code)
	}))
}

const (
	// clientPackage is the official client, pinned in node/package-lock.json.
	clientPackage = "rocketmq-client-nodejs"
	// npmTimeout bounds `npm ci` on a cold cache.
	npmTimeout = 150 * time.Second
	// nodeTimeout bounds one run of produce.js.
	nodeTimeout = 60 * time.Second
	// illegalMessagePropertyKey is apache.rocketmq.v2's 40007
	// ILLEGAL_MESSAGE_PROPERTY_KEY.
	illegalMessagePropertyKey = 40007
	// tooManyRequests is apache.rocketmq.v2's 42900 TOO_MANY_REQUESTS.
	tooManyRequests = 42900
	// internalServerError is apache.rocketmq.v2's 50001
	// INTERNAL_SERVER_ERROR.
	internalServerError = 50001
)

// resendAfter matches the client's warning before it re-sends a throttled
// message: "... would attempt to resend after 0ms, ...".
var resendAfter = regexp.MustCompile(`would attempt to resend after (\d+)ms`)

// TestOfficialNodeProducer sends messages with the official RocketMQ
// Node.js client's Producer to the bundled broker on its faithful face (no
// deduplication by message id, as the Apache proxy), which throttles (a
// small backlog limit with a consumer draining it), answers a share of
// sends INTERNAL (nothing stored), stores a share and answers them INTERNAL
// all the same, and drops the connection instead of answering a few (so
// that the client re-sends messages already stored). It checks from the
// broker's store (checkStore) that every message the client reports sent
// is stored, and more than once only after unknown outcomes, that every
// message not stored is one the client reports failed (nothing is lost
// without the client knowing), and that the broker's copies are no more
// than the unknown outcomes the client met. It logs how the client
// retried, from its own attempts and from the broker's send observer.
func TestOfficialNodeProducer(t *testing.T) {
	const (
		topic       = "interop"
		count       = 300
		concurrency = 8
		maxAttempts = 3
	)
	nodeModules := installClient(t)

	withObserver, observed := observer()
	b := brokertest.Start(t,
		broker.WithSeed(1),
		broker.WithTopics(topic),
		broker.WithFaults(broker.Faults{InternalRate: 0.1, StoredInternalRate: 0.05, DropRate: 0.02}),
		broker.WithThrottle(broker.Throttle{MaxBacklog: 20}),
		withObserver,
	)
	drained := drain(t, b.Addr(), topic, 5, 10*time.Millisecond)

	s, stderr := runProduce(t, nodeModules,
		"--endpoint", b.Addr(), "--topic", topic, "--count", strconv.Itoa(count),
		"--concurrency", strconv.Itoa(concurrency), "--max-attempts", strconv.Itoa(maxAttempts))
	t.Logf("client %s %s: started in %.0f ms, sent %d and failed %d of %d in %.0f ms with %d SendMessage calls; %d lines on stderr",
		s.Client.Package, s.Client.Version, s.StartupMs, s.Sent, s.Failed, count, s.SendMs, s.SendRequests, strings.Count(stderr, "\n"))
	for _, st := range s.Settings {
		t.Logf("Settings the client took from the broker: %s", st.Settings)
	}
	if s.ShutdownError != nil {
		t.Errorf("producer.shutdown() = %s; want success", s.ShutdownError)
	}
	checkStore(t, b, topic, s, count)

	logRetries(t, s, observed(), drained())
	waits := map[string]int{}
	for _, m := range resendAfter.FindAllStringSubmatch(stderr, -1) {
		waits[m[1]+" ms"]++
	}
	t.Logf("the client's stated waits before re-sending after 42900: %s", formatStrCounts(waits))
	if t.Failed() {
		t.Logf("produce.js stderr (last 4 KiB):\n%s", tail(stderr, 4096))
	}
}

// TestOfficialNodeProducerRetriesBadRequest pins how the official client
// treats a refusal that cannot succeed later: the broker answers 40007
// ILLEGAL_MESSAGE_PROPERTY_KEY to a message with an empty property name,
// which the client does not check, and the client re-sends it at once
// until its attempts are spent, then fails the send with that code.
func TestOfficialNodeProducerRetriesBadRequest(t *testing.T) {
	const (
		topic       = "interop"
		count       = 5
		maxAttempts = 3
	)
	nodeModules := installClient(t)
	withObserver, observed := observer()
	b := brokertest.Start(t, broker.WithTopics(topic), withObserver)

	s, _ := runProduce(t, nodeModules,
		"--endpoint", b.Addr(), "--topic", topic, "--count", strconv.Itoa(count),
		"--concurrency", "1", "--max-attempts", strconv.Itoa(maxAttempts), "--property", "=x")
	require.Len(t, s.Messages, count, "messages in the summary")
	assert.Equal(t, 0, s.Sent, "messages sent")
	assert.Empty(t, b.Messages(topic), "messages stored")
	byID := map[string][]broker.SendRecord{}
	for _, r := range observed() {
		byID[r.MessageID] = append(byID[r.MessageID], r)
	}
	for _, m := range s.Messages {
		require.NotNil(t, m.Error, "message %d: failed without an error", m.Index)
		assert.Equal(t, illegalMessagePropertyKey, m.Error.Code, "message %d: code of the error send() rejected with (%s)", m.Index, m.Error.Message)
		assert.Len(t, m.Attempts, maxAttempts, "message %d: the client's attempts", m.Index)
		rs := byID[m.MessageID]
		if assert.Len(t, rs, maxAttempts, "message %d: attempts the broker saw", m.Index) {
			for _, r := range rs {
				assert.Equal(t, broker.SendBadRequest, r.Result, "message %d: the broker's result", m.Index)
			}
			t.Logf("message %d: %d attempts, %v from first to last at the broker", m.Index, len(rs), rs[len(rs)-1].Time.Sub(rs[0].Time))
		}
	}
}

// TestNodeClientReadsBackoffSecondsAsMilliseconds pins a bug of the
// official client (1.0.8): it takes whole seconds from the Durations of the
// broker's exponential_backoff and waits that many milliseconds. The broker
// asks for 1 s, then 2 s (initial 1 s, multiplier 2, max 4 s) between
// attempts at a throttled message; the client waits 2 ms and 4 ms
// (min(initial.seconds * multiplier^(n-1), max.seconds) before attempt n)
// and gives up within milliseconds on a message a correct client would
// deliver a second later. The broker's send rate of 0.1 message per second
// (a bucket of one) stores the first message and throttles the second for
// 10 s, so a slow machine does not change the outcome.
func TestNodeClientReadsBackoffSecondsAsMilliseconds(t *testing.T) {
	const topic = "interop"
	nodeModules := installClient(t)
	withObserver, observed := observer()
	b := brokertest.Start(t, broker.WithTopics(topic), withObserver,
		broker.WithClientRetryPolicy(3, time.Second, 4*time.Second, 2),
		broker.WithThrottle(broker.Throttle{MaxSendRate: 0.1}))

	s, stderr := runProduce(t, nodeModules,
		"--endpoint", b.Addr(), "--topic", topic, "--count", "2", "--concurrency", "1", "--max-attempts", "3")
	require.Len(t, s.Messages, 2, "messages in the summary")
	assert.True(t, s.Messages[0].OK, "message 0 sent (the bucket's one token)")
	second := s.Messages[1]
	waits := statedWaits(resendAfter, stderr)
	assert.Equal(t, []string{"2", "4"}, waits, "the client's stated waits in ms before attempts 2 and 3; the broker asked for 1 s and 2 s")
	if assert.NotNil(t, second.Error, "message 1 failed") {
		assert.Equal(t, tooManyRequests, second.Error.Code, "message 1: code of the error send() rejected with")
	}
	rs := recordsOf(observed(), second.MessageID)
	if assert.Len(t, rs, 3, "attempts at message 1 the broker saw") {
		took := rs[2].Time.Sub(rs[0].Time)
		t.Logf("message 1: 3 attempts, all %s, %v from first to last at the broker (the broker's policy asks for 3 s)", rs[0].Result, took)
		assert.Less(t, took, time.Second, "first to last attempt at message 1")
	}
}

// TestOfficialNodeProducerFailsOverAndIsolates runs the client against a
// cluster of two brokers, one of which answers every send 50001. The route
// lists queue 0 of both (the only queue the client writes to), under two
// broker names; the client re-sends a failed message to the other broker
// at once and isolates the failing one for the rest of its life, so that
// broker sees one attempt in all and every message is stored on the other.
func TestOfficialNodeProducerFailsOverAndIsolates(t *testing.T) {
	const (
		topic = "interop"
		count = 20
	)
	nodeModules := installClient(t)
	brokers := brokertest.StartCluster(t, 2, broker.WithTopics(topic))
	healthy, failing := brokers[0], brokers[1]
	require.NoError(t, failing.SetFaults(broker.Faults{InternalRate: 1}))

	s, _ := runProduce(t, nodeModules,
		"--endpoint", healthy.Addr(), "--topic", topic, "--count", strconv.Itoa(count), "--concurrency", "1", "--max-attempts", "3")
	assert.Equal(t, count, s.Sent, "messages sent")
	assert.Len(t, healthy.Messages(topic), count, "messages stored on the healthy broker")
	assert.Empty(t, failing.Messages(topic), "messages stored on the failing broker")
	assert.Equal(t, int64(1), failing.SendRequests(broker.ProtocolRocketMQV2), "SendMessage calls the failing broker got")
	for _, m := range s.Messages {
		if len(m.Attempts) > 1 {
			t.Logf("message %d: attempts at %s then %s, %.3f ms apart", m.Index, m.Attempts[0].Endpoints, m.Attempts[1].Endpoints, m.Attempts[1].AtMs-m.Attempts[0].AtMs)
		}
	}
}

// observer returns a broker option that records every SendRecord, and a
// function returning a copy of the records so far.
func observer() (broker.Option, func() []broker.SendRecord) {
	var (
		mu      sync.Mutex
		records []broker.SendRecord
	)
	opt := broker.WithSendObserver(func(r broker.SendRecord) {
		mu.Lock()
		defer mu.Unlock()
		records = append(records, r)
	})
	return opt, func() []broker.SendRecord {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(records)
	}
}

// logRetries logs how the client retried: attempts per message, from its
// own count and from the broker's observer (which must have seen every
// answered attempt and no more attempts than the client made), the codes
// that made it retry and the gaps between attempts as the broker saw them.
func logRetries(t *testing.T, s summary, records []broker.SendRecord, drained int) {
	t.Helper()
	byID := map[string][]broker.SendRecord{}
	for _, r := range records {
		if r.Protocol == broker.ProtocolRocketMQV2 {
			byID[r.MessageID] = append(byID[r.MessageID], r)
		}
	}
	hist := map[int]int{}
	failedBy := map[string]int{}
	retriedAfter := map[string]int{}
	var mismatch []string
	for _, m := range s.Messages {
		hist[len(m.Attempts)]++
		if !m.OK && m.Error != nil {
			failedBy[m.Error.String()]++
		}
		for _, a := range m.Attempts[:max(len(m.Attempts)-1, 0)] {
			retriedAfter[a.outcome()]++
		}
		// The broker saw every attempt that was answered, and no attempt
		// the client did not make; an attempt failing on a broken
		// connection may not have reached it.
		answered := 0
		for _, a := range m.Attempts {
			if a.Error == nil {
				answered++
			}
		}
		if got := len(byID[m.MessageID]); got < answered || got > len(m.Attempts) {
			mismatch = append(mismatch, fmt.Sprintf("%s: client %d attempts, %d answered; broker %d", m.MessageID, len(m.Attempts), answered, got))
		}
	}
	t.Logf("attempts per message (client's count): %s", formatCounts(hist))
	t.Logf("retried after: %s", formatStrCounts(retriedAfter))
	t.Logf("failed messages by last error: %s", formatStrCounts(failedBy))
	t.Logf("consumer drained %d messages", drained)
	assert.Empty(t, mismatch, "attempts per message, client's count against the broker's observer")
	results := map[string]int{}
	for _, r := range records {
		results[strings.TrimSuffix(r.Result+" "+r.Reason, " ")]++
	}
	t.Logf("the broker's results of the client's attempts: %s", formatStrCounts(results))

	// Gaps between a message's attempts at the broker, by the result of
	// the attempt before the gap.
	gaps := map[string][]time.Duration{}
	for _, rs := range byID {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Time.Before(rs[j].Time) })
		for i := 1; i < len(rs); i++ {
			k := strings.TrimSuffix(rs[i-1].Result+" "+rs[i-1].Reason, " ")
			gaps[k] = append(gaps[k], rs[i].Time.Sub(rs[i-1].Time))
		}
	}
	for _, k := range sortedKeys(gaps) {
		g := gaps[k]
		slices.Sort(g)
		t.Logf("gap after %q at the broker: n=%d min=%v median=%v max=%v", k, len(g), g[0], g[len(g)/2], g[len(g)-1])
	}
}

// summary is produce.js's JSON summary.
type summary struct {
	Client struct {
		Package string `json:"package"`
		Version string `json:"version"`
	} `json:"client"`
	Error     string  `json:"error"`
	StartupMs float64 `json:"startupMs"`
	SendMs    float64 `json:"sendMs"`
	Settings  []struct {
		Settings json.RawMessage `json:"settings"`
	} `json:"settings"`
	StartupError  *clientError `json:"startupError"`
	ShutdownError *clientError `json:"shutdownError"`
	Sent          int          `json:"sent"`
	Failed        int          `json:"failed"`
	SendRequests  int          `json:"sendRequests"`
	Messages      []message    `json:"messages"`
}

// message is one message of the summary: sent with a receipt, or failed
// with the error send() rejected with, and each SendMessage call that
// carried it.
type message struct {
	Index     int    `json:"index"`
	MessageID string `json:"messageId"`
	OK        bool   `json:"ok"`
	Receipt   *struct {
		MessageID string `json:"messageId"`
		Offset    int64  `json:"offset"`
	} `json:"receipt"`
	Error    *clientError `json:"error"`
	Attempts []attempt    `json:"attempts"`
}

// attempt is one SendMessage call: answered with a RocketMQ code (the
// first bad entry's, else the top-level one) or failed with an error.
type attempt struct {
	AtMs       float64      `json:"atMs"`
	DurationMs float64      `json:"durationMs"`
	Endpoints  string       `json:"endpoints"`
	Code       int          `json:"code"`
	Error      *clientError `json:"error"`
}

// unknownOutcomes counts the attempts at m whose outcome the client could
// not know: no answer (their RPC failed) or 50001 INTERNAL_SERVER_ERROR,
// which a proxy answers after the broker stored the message too. The
// broker may have stored the message on each.
func (m message) unknownOutcomes() int {
	n := 0
	for _, a := range m.Attempts {
		switch {
		case a.Error != nil && a.Error.GRPCCode != nil,
			a.Error != nil && a.Error.Code == internalServerError,
			a.Error == nil && a.Code == internalServerError:
			n++
		}
	}
	return n
}

func (a attempt) outcome() string {
	if a.Error != nil {
		return a.Error.String()
	}
	return strconv.Itoa(a.Code)
}

// clientError is an error as produce.js reports it: a RocketMQ status the
// client raised (Code), a gRPC error (GRPCCode) or another error.
type clientError struct {
	Name     string `json:"name"`
	Code     int    `json:"code"`
	GRPCCode *int   `json:"grpcCode"`
	Message  string `json:"message"`
}

func (e *clientError) String() string {
	switch {
	case e.GRPCCode != nil:
		return fmt.Sprintf("grpc %d", *e.GRPCCode)
	case e.Code != 0:
		return fmt.Sprintf("%s %d", e.Name, e.Code)
	}
	return e.Name + ": " + e.Message
}

// runProduce runs produce.js with args and returns its summary and stderr.
// It fails the test when the script does not exit 0 with a summary.
func runProduce(t *testing.T, nodeModules string, args ...string) (summary, string) {
	t.Helper()
	node, _ := exec.LookPath("node")
	script, err := filepath.Abs(filepath.Join("node", "produce.js"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), nodeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), "NODE_PATH="+nodeModules)
	cmd.Dir = t.TempDir()
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var s summary
	if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
		t.Fatalf("node produce.js %s: %v, summary %v; want exit 0 with a JSON summary\nstdout:\n%s\nstderr:\n%s",
			strings.Join(args, " "), runErr, err, tail(stdout.String(), 2048), tail(stderr.String(), 4096))
	}
	if runErr != nil || s.Error != "" {
		t.Fatalf("node produce.js %s: %v, error %q (startup: %v); want exit 0\nstderr:\n%s",
			strings.Join(args, " "), runErr, s.Error, s.StartupError, tail(stderr.String(), 4096))
	}
	return s, stderr.String()
}

// installClient returns a node_modules directory holding the client as
// node/package-lock.json pins it. It runs `npm ci` once per lock file into
// a directory of the user cache named after the files' hash, installing
// aside and renaming so that a half-done install is never used. It skips
// the test only when node or npm is missing.
func installClient(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not on PATH (%v): this test runs the official RocketMQ Node.js client and needs Node.js 18+ with npm", tool, err)
		}
	}
	h := sha256.New()
	files := map[string][]byte{}
	for _, name := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join("node", name))
		require.NoError(t, err)
		files[name] = b
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
	}
	key := hex.EncodeToString(h.Sum(nil))[:16]

	root := t.TempDir()
	if dir, err := os.UserCacheDir(); err == nil {
		root = filepath.Join(dir, "rocketry", "interop-node")
	}
	dir := filepath.Join(root, key)
	modules := filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(modules, clientPackage, "package.json")); err == nil {
		return modules
	}
	require.NoError(t, os.MkdirAll(root, 0o755))
	tmp, err := os.MkdirTemp(root, key+".install-")
	require.NoError(t, err)
	defer os.RemoveAll(tmp) // nothing left after the rename
	for name, b := range files {
		require.NoError(t, os.WriteFile(filepath.Join(tmp, name), b, 0o644))
	}
	ctx, cancel := context.WithTimeout(t.Context(), npmTimeout)
	defer cancel()
	npm, _ := exec.LookPath("npm")
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = tmp
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("npm ci in %s: %v; want success\n%s", tmp, err, out)
	}
	t.Logf("npm ci: installed %s in %v into %s", clientPackage, time.Since(start).Round(time.Millisecond), dir)
	if err := os.Rename(tmp, dir); err != nil {
		// Another run may have installed the same lock file meanwhile.
		if _, statErr := os.Stat(modules); statErr != nil {
			t.Fatalf("installing into %s: %v", dir, errors.Join(err, statErr))
		}
	}
	return modules
}

// drain consumes topic as group "drain", up to n messages every period
// with auto-commit, so that the broker's backlog throttle opens again. It
// dials in plaintext unless opts say otherwise (a TLS broker). It stops
// when the test ends; the function it returns tells how many messages it
// consumed so far.
func drain(t *testing.T, addr, topic string, n int32, period time.Duration, opts ...grpc.DialOption) func() int {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	require.NoError(t, err)
	c := rocketryv1.NewConsumerServiceClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		got int
	)
	wg.Go(func() {
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			r, err := c.ReceiveMessages(ctx, &rocketryv1.ReceiveMessagesRequest{Topic: topic, Group: "drain", MaxMessages: n, AutoCommit: true})
			if err == nil {
				mu.Lock()
				got += len(r.GetMessages())
				mu.Unlock()
			}
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		conn.Close()
	})
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return got
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

func formatCounts(m map[int]int) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%d: %d, ", k, m[k])
	}
	return strings.TrimSuffix(b.String(), ", ")
}

func formatStrCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var b strings.Builder
	for _, k := range sortedKeys(m) {
		fmt.Fprintf(&b, "%s: %d, ", k, m[k])
	}
	return strings.TrimSuffix(b.String(), ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
