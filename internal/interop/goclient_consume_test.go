package interop_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rocketry-go/rocketry/broker"
)

// goConsumeSummary is goclient/cmd/consume's JSON summary: consume.js's,
// plus the Receive calls answered 40401 MESSAGE_NOT_FOUND, which the Go
// client returns as an error, and the ChangeInvisibleDuration calls
// answered 20000.
type goConsumeSummary struct {
	consumeSummary
	EmptyReceives    int `json:"emptyReceives"`
	InvisibleChanges int `json:"invisibleChanges"`
}

// TestOfficialGoSimpleConsumer is TestOfficialNodeSimpleConsumer with the
// official Go client (5.1.2): its Producer sends FIFO groups
// (SetMessageGroup) and timed messages (SetDelayTimestamp), and its
// SimpleConsumer reads them back from the bundled broker (TLS, one topic
// declared FIFO and one DELAY), leaving the first delivery of every
// seventh message unacknowledged so that it comes back after its
// invisible time, and renewing the invisible time of every fifth message
// it acknowledges before the Ack (ChangeInvisibleDuration, whose new
// receipt handle the Ack must carry). The checks are the Node.js test's (checkConsumed): every
// message acknowledged exactly once, each group in send order with no
// message delivered before the previous one was acknowledged, a message
// delivered again only after an unacknowledged delivery, no timed message
// received before its delivery time.
func TestOfficialGoSimpleConsumer(t *testing.T) {
	const (
		fifoTopic  = "interop-fifo"
		timedTopic = "interop-timed"
		groups     = 4
		perGroup   = 20
		timed      = 5
	)
	prog := buildGoProgram(t, "consume")
	b, _ := startTLSBroker(t,
		broker.WithTopicType(fifoTopic, broker.TopicFIFO),
		broker.WithTopicType(timedTopic, broker.TopicDelay),
		// The client sends no long_polling_timeout, so the broker polls
		// for the call's deadline (await + 3 s) less 1.5 s, as the proxy
		// does, which this bound cuts to 200 ms: each Receive takes a
		// topic at random, and one on the topic with nothing receivable
		// waits the whole poll.
		broker.WithLongPolling(100*time.Millisecond, 200*time.Millisecond),
		broker.WithMinInvisibleDuration(500*time.Millisecond),
	)
	s, stderr := runGoConsume(t, prog,
		"--endpoint", b.Addr(), "--fifo-topic", fifoTopic, "--timed-topic", timedTopic,
		"--groups", strconv.Itoa(groups), "--per-group", strconv.Itoa(perGroup), "--timed", strconv.Itoa(timed),
		"--timed-delay", "1500ms", "--invisible", "1s", "--await", "200ms", "--skip-ack-every", "7", "--change-every", "5")
	t.Logf("client %s %s: sent %d, %d events, %d Receive calls answered 40401, %d invisible times renewed, %d lines on stderr",
		s.Client.Package, s.Client.Version, len(s.Sent), len(s.Events), s.EmptyReceives, s.InvisibleChanges, strings.Count(stderr, "\n"))
	checkConsumed(t, b, s.consumeSummary, groups, perGroup, timed)
	// Every acknowledgement is checked OK, those after a renewal included.
	assert.Positive(t, s.InvisibleChanges, "invisible times renewed (ChangeInvisibleDuration)")
	if t.Failed() {
		t.Logf("consume stderr (last 4 KiB):\n%s", tail(stderr, 4096))
	}
}

// checkConsumed checks a consume summary (consume.js's or
// goclient/cmd/consume's) and the broker's consumer group after it: every
// message sent is acknowledged exactly once; each group's messages are
// acknowledged in send order, and none is delivered before the group's
// previous message was acknowledged; a message is delivered again only
// when its previous delivery was not acknowledged, with delivery_attempt
// one higher; no timed message is received before its delivery time; the
// group's backlog is 0 on every topic.
func checkConsumed(t *testing.T, b *broker.Broker, s consumeSummary, groups, perGroup, timed int) {
	t.Helper()
	require.Empty(t, s.sendErrors(), "send errors")
	require.Len(t, s.Sent, groups*perGroup+timed, "messages sent")
	assert.Empty(t, s.ReceiveErrors, "receive errors")
	if s.ShutdownError != nil {
		t.Errorf("shutdown = %v; want success", s.ShutdownError)
	}

	sent := map[string]sentMessage{}
	for _, m := range s.Sent {
		require.NotEmpty(t, m.MessageID, "%s message %s %d: no message id in its receipt", m.Kind, m.Group, m.Seq)
		sent[m.MessageID] = m
	}
	acks := map[string]int{}
	lastAck := map[string]int{}        // group -> seq of the last acknowledged message
	deliveries := map[string][]event{} // message id -> its deliveries
	redelivered := 0
	for _, e := range s.Events {
		m, ok := sent[e.MessageID]
		require.True(t, ok, "event %d: message %s was not sent by the program", e.Seq, e.MessageID)
		switch e.Kind {
		case "receive":
			assert.False(t, e.Corrupted, "event %d: message %s corrupted (digest)", e.Seq, e.MessageID)
			prev := deliveries[e.MessageID]
			assert.Equal(t, len(prev)+1, e.Attempt, "event %d: delivery_attempt of message %s", e.Seq, e.MessageID)
			if len(prev) > 0 {
				redelivered++
				assert.True(t, prev[len(prev)-1].SkippedAck, "event %d: message %s delivered again after an acknowledged delivery", e.Seq, e.MessageID)
			}
			deliveries[e.MessageID] = append(prev, e)
			switch m.Kind {
			case "fifo":
				assert.Equal(t, m.Group, e.Group, "event %d: message group of %s", e.Seq, e.MessageID)
				last, ok := lastAck[m.Group]
				if !ok {
					last = -1
				}
				assert.Equal(t, m.Seq-1, last, "event %d: %s message %d delivered after message %d was acknowledged; want it after message %d",
					e.Seq, m.Group, m.Seq, last, m.Seq-1)
			case "timed":
				require.NotNil(t, e.DeliveryTimestampMs, "event %d: timed message %s has no delivery timestamp", e.Seq, e.MessageID)
				assert.Equal(t, m.DeliverAtMs, *e.DeliveryTimestampMs, "event %d: delivery timestamp of %s", e.Seq, e.MessageID)
				assert.GreaterOrEqual(t, e.AtMs, m.DeliverAtMs, "event %d: timed message %s received %d ms before its delivery time",
					e.Seq, e.MessageID, m.DeliverAtMs-e.AtMs)
			}
		case "ack":
			acks[e.MessageID]++
			if m.Kind == "fifo" {
				if want, ok := lastAck[m.Group]; ok {
					assert.Equal(t, want+1, m.Seq, "event %d: %s acknowledged message %d after %d", e.Seq, m.Group, m.Seq, want)
				} else {
					assert.Equal(t, 0, m.Seq, "event %d: %s's first acknowledged message", e.Seq, m.Group)
				}
				lastAck[m.Group] = m.Seq
			}
		default:
			t.Errorf("event %d: %s of message %s: %v", e.Seq, e.Kind, e.MessageID, e.Error)
		}
	}
	for id, m := range sent {
		assert.Equal(t, 1, acks[id], "acknowledgements of %s message %s (%s %d)", m.Kind, id, m.Group, m.Seq)
	}
	for g := range groups {
		assert.Equal(t, perGroup-1, lastAck[fmt.Sprintf("group-%d", g)], "last acknowledged message of group-%d", g)
	}
	assert.Positive(t, redelivered, "messages delivered again after an unacknowledged delivery")
	assert.Empty(t, s.Error, "the program's error")
	t.Logf("%d deliveries again after an unacknowledged one", redelivered)
	// The consumer group is a group of the store: everything acknowledged,
	// its backlog is 0 on both topics.
	for _, ts := range b.Stats().GetTopics() {
		require.Len(t, ts.GetGroups(), 1, "consumer groups of %s", ts.GetTopic())
		assert.Equal(t, "interop-consumer", ts.GetGroups()[0].GetGroup())
		assert.Zero(t, ts.GetGroups()[0].GetBacklog(), "backlog of the consumer group on %s", ts.GetTopic())
	}
}

// buildGoProgram builds goclient/cmd/NAME, in the module that requires the
// official Go client, into the test's temporary directory and returns its
// path. A failed build or module download fails the test.
func buildGoProgram(t *testing.T, name string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go tool")
	path := filepath.Join(t.TempDir(), name)
	ctx, cancel := context.WithTimeout(t.Context(), goBuildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", path, "./cmd/"+name)
	cmd.Dir = "goclient"
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/%s in goclient/ (the official Go client, %s): %v; want success\n%s", name, goClientModule, err, out)
	}
	t.Logf("go build ./cmd/%s in goclient/: %v", name, time.Since(start).Round(time.Millisecond))
	return path
}

// runGoConsume runs goclient/cmd/consume with args and returns its summary
// and stderr. It fails the test when the program does not exit 0 with a
// summary.
func runGoConsume(t *testing.T, prog string, args ...string) (goConsumeSummary, string) {
	t.Helper()
	var s goConsumeSummary
	return s, runProgram(t, "consume", goProduceTimeout, append([]string{prog}, args...), nil, &s)
}
