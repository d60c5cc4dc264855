package interop_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
)

const (
	// goClientModule is the official Go client, pinned in goclient/go.mod.
	goClientModule = "github.com/apache/rocketmq-clients/golang/v5"
	// goBuildTimeout bounds building goclient/cmd/produce, module download
	// included.
	goBuildTimeout = 3 * time.Minute
	// goProduceTimeout bounds one run of the program.
	goProduceTimeout = 60 * time.Second
)

// goResendAfter matches the Go client's warning before it re-sends a
// throttled message: "... would attempt to resend after 20ms, topic=...".
var goResendAfter = regexp.MustCompile(`would attempt to resend after ([^,\s]+),`)

// goProduce is the program built from goclient/cmd/produce, once per run of
// the test binary (see TestMain).
var goProduce struct {
	once sync.Once
	dir  string // removed by TestMain
	path string
	err  error
	out  []byte
}

// buildGoProduce builds goclient/cmd/produce, a module of its own that
// requires the official Go client, and returns the program's path. The
// first call builds (downloading the module through the Go module proxy on
// a cold cache); a failed build or download fails the test.
func buildGoProduce(t *testing.T) string {
	t.Helper()
	goProduce.once.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			goProduce.err = err
			return
		}
		if goProduce.dir, err = os.MkdirTemp("", "rocketry-interop-go-"); err != nil {
			goProduce.err = err
			return
		}
		goProduce.path = filepath.Join(goProduce.dir, "produce")
		ctx, cancel := context.WithTimeout(context.Background(), goBuildTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, goTool, "build", "-o", goProduce.path, "./cmd/produce")
		cmd.Dir = "goclient"
		cmd.WaitDelay = 5 * time.Second
		start := time.Now()
		goProduce.out, goProduce.err = cmd.CombinedOutput()
		t.Logf("go build ./cmd/produce in goclient/: %v", time.Since(start).Round(time.Millisecond))
	})
	if goProduce.err != nil {
		t.Fatalf("go build ./cmd/produce in goclient/ (the official Go client, %s): %v; want success\n%s",
			goClientModule, goProduce.err, goProduce.out)
	}
	return goProduce.path
}

// removeGoProduce removes what buildGoProduce built.
func removeGoProduce() {
	if goProduce.dir != "" {
		os.RemoveAll(goProduce.dir)
	}
}

// startTLSBroker starts a broker serving TLS, as the Go client requires,
// and returns it with a dial option that trusts its certificate.
func startTLSBroker(t *testing.T, opts ...broker.Option) (*broker.Broker, grpc.DialOption) {
	t.Helper()
	b, cfg := brokertest.StartTLS(t, opts...)
	return b, grpc.WithTransportCredentials(credentials.NewTLS(cfg))
}

// TestOfficialGoProducer is TestOfficialNodeProducer with the official Go
// client: the same broker (TLS, backlog throttling drained by a consumer,
// 10% INTERNAL answers, 5% stored and then answered INTERNAL, 2% dropped
// connections; no deduplication by message id), the same checks from the
// broker's store (checkStore) and the same log of how the client retried,
// plus the waits it states before re-sending a throttled message.
func TestOfficialGoProducer(t *testing.T) {
	const (
		topic       = "interop"
		count       = 300
		concurrency = 8
		maxAttempts = 3
	)
	prog := buildGoProduce(t)
	withObserver, observed := observer()
	b, creds := startTLSBroker(t,
		broker.WithSeed(1),
		broker.WithTopics(topic),
		broker.WithFaults(broker.Faults{InternalRate: 0.1, StoredInternalRate: 0.05, DropRate: 0.02}),
		broker.WithThrottle(broker.Throttle{MaxBacklog: 20}),
		broker.WithACL(interopACL),
		withObserver,
	)
	drained := drain(t, b.Addr(), topic, 5, 10*time.Millisecond, creds)

	s, stderr := runGoProduce(t, prog, append(interopKeys(),
		"--endpoint", b.Addr(), "--topic", topic, "--count", strconv.Itoa(count),
		"--concurrency", strconv.Itoa(concurrency), "--max-attempts", strconv.Itoa(maxAttempts))...)
	assert.Zero(t, b.AuthRefused(""), "the client signs every call with the right keys")
	t.Logf("client %s %s: started in %.0f ms, sent %d and failed %d of %d in %.0f ms with %d SendMessage calls; %d lines on stderr",
		s.Client.Package, s.Client.Version, s.StartupMs, s.Sent, s.Failed, count, s.SendMs, s.SendRequests, strings.Count(stderr, "\n"))
	for _, st := range s.Settings {
		t.Logf("Settings the client took from the broker: %s", st.Settings)
	}
	if s.ShutdownError != nil {
		t.Errorf("producer.GracefulStop() = %s; want success", s.ShutdownError)
	}
	checkStore(t, b, topic, s, count)
	logRetries(t, s, observed(), drained())
	waits := map[string]int{}
	for _, m := range goResendAfter.FindAllStringSubmatch(stderr, -1) {
		waits[m[1]]++
	}
	t.Logf("the client's stated waits before re-sending after 42900: %s; re-sent at once after another failure: %d times",
		formatStrCounts(waits), strings.Count(stderr, "would attempt to resend right now"))
	if t.Failed() {
		t.Logf("produce stderr (last 4 KiB):\n%s", tail(stderr, 4096))
	}
}

// TestOfficialGoProducerWrongSecretRefused: the official Go client signing
// with a wrong secret is refused by the broker (40100 UNAUTHORIZED) and
// does not start; nothing is stored.
func TestOfficialGoProducerWrongSecretRefused(t *testing.T) {
	prog := buildGoProduce(t)
	b, _ := startTLSBroker(t, broker.WithTopics("interop"), broker.WithACL(interopACL))
	var s summary
	stderr, err := runProgramErr(t, "produce", goProduceTimeout, []string{prog,
		"--endpoint", b.Addr(), "--topic", "interop", "--count", "1", "--await-settings", "5s",
		"--access-key", "interop", "--secret-key", "wrong"}, nil, &s)
	require.Error(t, err, "the producer must not start with a wrong secret")
	assert.Positive(t, b.AuthRefused(""), "the broker refused the client's calls")
	assert.Contains(t, s.Error, "UNAUTHORIZED", "the client read the broker's 40100")
	assert.Zero(t, b.Stats().Stored)
	t.Logf("client error: %s (startup: %v); stderr (last 1 KiB):\n%s", s.Error, s.StartupError, tail(stderr, 1024))
}

// TestOfficialGoProducerBackoff pins how the Go client waits after 42900:
// it takes the broker's exponential_backoff as durations (unlike the
// Node.js client, which reads seconds as milliseconds) but waits
// min(initial*multiplier^(n-1), max) before attempt n, so before the
// second attempt already initial*multiplier, and it holds the wait in a
// uint32 of nanoseconds, so a wait above 4.29 s wraps around. The broker
// asks for initial 100 ms, multiplier 2, max 1 s: the client waits 200 ms
// and 400 ms (the broker's policy means 100 ms and 200 ms). The broker's
// send rate of 0.1 message per second (a bucket of one) stores the first
// message and throttles the second for 10 s, so a slow machine does not
// change the outcome.
func TestOfficialGoProducerBackoff(t *testing.T) {
	const topic = "interop"
	prog := buildGoProduce(t)
	withObserver, observed := observer()
	b, _ := startTLSBroker(t, broker.WithTopics(topic), withObserver,
		broker.WithClientRetryPolicy(3, 100*time.Millisecond, time.Second, 2),
		broker.WithThrottle(broker.Throttle{MaxSendRate: 0.1}))

	s, stderr := runGoProduce(t, prog,
		"--endpoint", b.Addr(), "--topic", topic, "--count", "2", "--concurrency", "1", "--max-attempts", "3")
	require.Len(t, s.Messages, 2, "messages in the summary")
	assert.True(t, s.Messages[0].OK, "message 0 sent (the bucket's one token)")
	second := s.Messages[1]
	waits := statedWaits(goResendAfter, stderr)
	assert.Equal(t, []string{"200ms", "400ms"}, waits, "the client's stated waits before attempts 2 and 3; the broker asked for 100 ms and 200 ms")
	if assert.NotNil(t, second.Error, "message 1 failed") {
		assert.Equal(t, tooManyRequests, second.Error.Code, "message 1: code of the error Send returned")
	}
	rs := recordsOf(observed(), second.MessageID)
	if assert.Len(t, rs, 3, "attempts at message 1 the broker saw") {
		// The client sleeps the stated wait between an answer and its next
		// attempt, so the broker's gaps are at least that long.
		assert.GreaterOrEqual(t, rs[1].Time.Sub(rs[0].Time), 200*time.Millisecond, "gap before attempt 2 at the broker")
		assert.GreaterOrEqual(t, rs[2].Time.Sub(rs[1].Time), 400*time.Millisecond, "gap before attempt 3 at the broker")
		t.Logf("message 1: 3 attempts, all %s, %v and %v apart at the broker", rs[0].Result, rs[1].Time.Sub(rs[0].Time), rs[2].Time.Sub(rs[1].Time))
	}
}

// TestOfficialGoProducerRetriesBadRequest: like the Node.js client, the Go
// client re-sends at once a message the broker refuses as invalid (40007
// ILLEGAL_MESSAGE_PROPERTY_KEY, for an empty property name it does not
// check) until its attempts are spent.
func TestOfficialGoProducerRetriesBadRequest(t *testing.T) {
	const (
		topic       = "interop"
		count       = 3
		maxAttempts = 3
	)
	prog := buildGoProduce(t)
	withObserver, observed := observer()
	b, _ := startTLSBroker(t, broker.WithTopics(topic), withObserver)

	s, _ := runGoProduce(t, prog,
		"--endpoint", b.Addr(), "--topic", topic, "--count", strconv.Itoa(count),
		"--concurrency", "1", "--max-attempts", strconv.Itoa(maxAttempts), "--property", "=x")
	require.Len(t, s.Messages, count, "messages in the summary")
	assert.Equal(t, 0, s.Sent, "messages sent")
	assert.Empty(t, b.Messages(topic), "messages stored")
	byID := map[string]int{}
	for _, r := range observed() {
		assert.Equal(t, broker.SendBadRequest, r.Result, "the broker's result for %s", r.MessageID)
		byID[r.MessageID]++
	}
	for _, m := range s.Messages {
		require.NotNil(t, m.Error, "message %d: failed without an error", m.Index)
		assert.Equal(t, illegalMessagePropertyKey, m.Error.Code, "message %d: code of the error Send returned (%s)", m.Index, m.Error.Message)
		assert.Len(t, m.Attempts, maxAttempts, "message %d: the client's attempts", m.Index)
		assert.Equal(t, maxAttempts, byID[m.MessageID], "message %d: attempts the broker saw", m.Index)
	}
}

// TestOfficialGoProducerWrapsLongBackoff pins a bug of the Go client
// (5.1.2): it holds the wait before a re-sent throttled message in a
// uint32 of nanoseconds (producer.go, getNextAttemptDelay), so a wait
// above 4.29 s wraps around. The broker asks for initial 3 s, multiplier 2:
// the wait before attempt 2 is min(3 s * 2, 10 s) = 6 s, which the client
// turns into 1.705032704 s on amd64 (6e9 mod 2^32 ns; other platforms may
// saturate at 4.29 s instead). The throttled message fails sooner than the
// broker asked.
func TestOfficialGoProducerWrapsLongBackoff(t *testing.T) {
	const topic = "interop"
	prog := buildGoProduce(t)
	b, _ := startTLSBroker(t, broker.WithTopics(topic),
		broker.WithClientRetryPolicy(2, 3*time.Second, 10*time.Second, 2),
		broker.WithThrottle(broker.Throttle{MaxSendRate: 0.1}))

	s, stderr := runGoProduce(t, prog,
		"--endpoint", b.Addr(), "--topic", topic, "--count", "2", "--concurrency", "1", "--max-attempts", "2")
	require.Len(t, s.Messages, 2, "messages in the summary")
	assert.True(t, s.Messages[0].OK, "message 0 sent (the bucket's one token)")
	assert.False(t, s.Messages[1].OK, "message 1 sent; want throttled twice")
	waits := goResendAfter.FindAllStringSubmatch(stderr, -1)
	require.Len(t, waits, 1, "the client's stated waits")
	wait, err := time.ParseDuration(waits[0][1])
	require.NoError(t, err, "the client's stated wait %q", waits[0][1])
	assert.Less(t, wait, 6*time.Second, "the client's stated wait before attempt 2; the policy makes it 6 s")
	t.Logf("the client waited %v where its formula gives 6 s", wait)
}

// TestOfficialGoProducerDoesNotFailOver runs the Go client against two
// brokers, one of which answers every send 50001. The client sends each
// message to the queue its round robin gives, over every queue of the
// route: its load balancer (loadBalancer.go, TakeMessageQueues) looks at
// the same queue on every turn of its loop, so a send has one candidate
// and every attempt goes to the same broker; the isolation of a failing
// broker does not steer a send away, since an isolated broker is taken
// when no other candidate was found. A message whose queue is on the
// failing broker fails there after all its attempts. The checks hold
// whatever route the broker answers: every attempt at a message goes to
// one address, and each failed message spent its attempts on the failing
// broker.
func TestOfficialGoProducerDoesNotFailOver(t *testing.T) {
	const (
		topic       = "interop"
		count       = 16
		maxAttempts = 3
	)
	prog := buildGoProduce(t)
	var peers atomic.Pointer[[]broker.Peer]
	peers.Store(&[]broker.Peer{})
	route := broker.WithRoutePeers(func() []broker.Peer { return *peers.Load() })
	healthy, _ := startTLSBroker(t, broker.WithTopics(topic), broker.WithBrokerName("broker-0"), route)
	failing, _ := startTLSBroker(t, broker.WithTopics(topic), broker.WithBrokerName("broker-1"), route,
		broker.WithFaults(broker.Faults{InternalRate: 1}))
	peers.Store(&[]broker.Peer{{Name: "broker-0", Addr: healthy.Addr()}, {Name: "broker-1", Addr: failing.Addr()}})

	s, _ := runGoProduce(t, prog,
		"--endpoint", healthy.Addr(), "--topic", topic, "--count", strconv.Itoa(count),
		"--concurrency", "1", "--max-attempts", strconv.Itoa(maxAttempts))
	require.Len(t, s.Messages, count, "messages in the summary")
	assert.Len(t, healthy.Messages(topic), s.Sent, "messages stored on the healthy broker")
	assert.Empty(t, failing.Messages(topic), "messages stored on the failing broker")
	assert.Equal(t, int64(maxAttempts*s.Failed), failing.SendRequests(broker.ProtocolRocketMQV2), "SendMessage calls the failing broker got")
	for _, m := range s.Messages {
		require.NotEmpty(t, m.Attempts, "message %d: no attempt", m.Index)
		for _, a := range m.Attempts {
			assert.Equal(t, m.Attempts[0].Endpoints, a.Endpoints, "message %d: address of each attempt", m.Index)
		}
		if !m.OK {
			assert.Len(t, m.Attempts, maxAttempts, "message %d: attempts at the failing broker", m.Index)
			assert.Equal(t, failing.Addr(), m.Attempts[0].Endpoints, "message %d: failed at", m.Index)
		}
	}
	t.Logf("%d of %d messages failed after %d attempts each at the failing broker; %d stored on the healthy one",
		s.Failed, count, maxAttempts, s.Sent)
}

// runGoProduce runs the built program with args and returns its summary
// and stderr (the client's log). It fails the test when the program does
// not exit 0 with a summary.
func runGoProduce(t *testing.T, prog string, args ...string) (summary, string) {
	t.Helper()
	var s summary
	stderr := runProgram(t, "produce", goProduceTimeout, append([]string{prog}, args...), nil, &s)
	if s.Error != "" {
		t.Fatalf("produce %s: error %q (startup: %v); want none\nstderr:\n%s", strings.Join(args, " "), s.Error, s.StartupError, tail(stderr, 4096))
	}
	return s, stderr
}
