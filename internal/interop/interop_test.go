package interop_test

import (
	"fmt"
	"os"
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

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
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
	// nodeTimeout bounds one run of a node script (produce.js, consume.js,
	// tx.js). The scripts take 1-12 s alone; with every package's tests
	// running beside them on 2 loaded CPUs, consume.js once took over 60 s.
	nodeTimeout = 120 * time.Second
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
		broker.WithACL(interopACL),
		withObserver,
	)
	drained := drain(t, b.Addr(), topic, 5, 10*time.Millisecond)

	s, stderr := runProduce(t, nodeModules, append(interopKeys(),
		"--endpoint", b.Addr(), "--topic", topic, "--count", strconv.Itoa(count),
		"--concurrency", strconv.Itoa(concurrency), "--max-attempts", strconv.Itoa(maxAttempts))...)
	assert.Zero(t, b.AuthRefused(""), "the client signs every call with the right keys")
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

// interopACL is the ACL of the brokers of the main interop tests
// (TestOfficialNodeProducer, TestOfficialGoProducer): the official
// clients sign every call with interopKeys, as against a RocketMQ 5 proxy
// with authentication on.
var interopACL = map[string]string{"interop": "interop-secret"}

// interopKeys are the flags of produce.js and the Go produce program that
// sign with interopACL's key.
func interopKeys() []string {
	return []string{"--access-key", "interop", "--secret-key", "interop-secret"}
}

// TestOfficialNodeProducerWrongSecretRefused: the official client signing
// with a wrong secret is refused by the broker (40100 UNAUTHORIZED, as the
// proxy answers) and does not start; nothing is stored.
func TestOfficialNodeProducerWrongSecretRefused(t *testing.T) {
	nodeModules := installClient(t)
	b := brokertest.Start(t, broker.WithTopics("interop"), broker.WithACL(interopACL))
	argv, env := nodeArgv(t, nodeModules, "produce.js", "--endpoint", b.Addr(), "--topic", "interop",
		"--count", "1", "--startup-timeout-ms", "5000", "--access-key", "interop", "--secret-key", "wrong")
	var s summary
	stderr, err := runProgramErr(t, "node produce.js", nodeTimeout, argv, env, &s)
	require.Error(t, err, "the producer must not start with a wrong secret")
	assert.Positive(t, b.AuthRefused(""), "the broker refused the client's calls")
	assert.Zero(t, b.Stats().Stored)
	t.Logf("client error: %s (startup: %v); stderr (last 1 KiB):\n%s", s.Error, s.StartupError, tail(stderr, 1024))
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
		// Every attempt throttled: the bucket's next token is 10 s away,
		// so the client gave up well within the 3 s the broker asked for
		// (pinned by its stated waits above, not by a clock).
		for i, r := range rs {
			assert.Equal(t, broker.SendThrottled, r.Result, "attempt %d at message 1", i+1)
		}
		t.Logf("message 1: 3 attempts, %v from first to last at the broker (the broker's policy asks for 3 s)", rs[2].Time.Sub(rs[0].Time))
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
