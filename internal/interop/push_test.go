package interop_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
)

// pushSummary is push.js's JSON summary.
type pushSummary struct {
	Client struct {
		Package string `json:"package"`
		Version string `json:"version"`
	} `json:"client"`
	Error         string        `json:"error"`
	Stuck         string        `json:"stuck"`
	StartupError  *clientError  `json:"startupError"`
	ShutdownError *clientError  `json:"shutdownError"`
	SendErrors    []clientError `json:"sendErrors"`
	Settings      struct {
		ReceiveBatchSize     int   `json:"receiveBatchSize"`
		LongPollingTimeoutMs int64 `json:"longPollingTimeoutMs"`
		Fifo                 bool  `json:"fifo"`
	} `json:"settings"`
	Sent       []string `json:"sent"`
	Deliveries []struct {
		MessageID string  `json:"messageId"`
		Attempt   int     `json:"attempt"`
		AtMs      float64 `json:"atMs"`
	} `json:"deliveries"`
}

// TestOfficialNodePushConsumer runs node/push.js: the client's
// PushConsumer (QueryAssignment, then receives with auto_renew and the
// batch size and long polling timeout of the broker's Settings) gets every
// message its Producer sent, each once, on its first attempt, and
// acknowledges them all: the group's backlog is 0 and nothing comes back
// while the script lingers.
func TestOfficialNodePushConsumer(t *testing.T) {
	const (
		topic    = "interop-push"
		group    = "interop-push-group"
		messages = 60
	)
	nodeModules := installClient(t)
	b := brokertest.Start(t, broker.WithLongPolling(100*time.Millisecond, 2*time.Second))
	argv, env := nodeArgv(t, nodeModules, "push.js",
		"--endpoint", b.Addr(), "--topic", topic, "--group", group,
		"--messages", strconv.Itoa(messages), "--linger-ms", "3000", "--timeout-ms", "30000")
	var s pushSummary
	stderr, err := runProgramErr(t, "node push.js", nodeTimeout, argv, env, &s)
	require.NoError(t, err)
	t.Logf("client %s %s: sent %d, %d deliveries, %d lines on stderr", s.Client.Package, s.Client.Version, len(s.Sent), len(s.Deliveries), strings.Count(stderr, "\n"))
	require.Empty(t, s.Error, "push.js: %s\nstderr:\n%s", s.Error, stderr)
	require.Empty(t, s.SendErrors, "send errors")
	require.Len(t, s.Sent, messages)
	assert.Nil(t, s.ShutdownError, "shutdown")

	assert.Equal(t, 32, s.Settings.ReceiveBatchSize, "receive_batch_size the client took from the broker's Settings")
	assert.Equal(t, int64(2000), s.Settings.LongPollingTimeoutMs, "long_polling_timeout the client took: the broker's longest polling time")
	assert.False(t, s.Settings.Fifo)

	count := map[string]int{}
	for _, d := range s.Deliveries {
		count[d.MessageID]++
		assert.Equal(t, 1, d.Attempt, "delivery attempt of %s", d.MessageID)
	}
	for _, id := range s.Sent {
		assert.Equal(t, 1, count[id], "deliveries of %s", id)
	}
	assert.Len(t, count, messages, "distinct messages delivered")

	var backlog int64 = -1
	for _, ts := range b.Stats().GetTopics() {
		if ts.GetTopic() != topic {
			continue
		}
		for _, g := range ts.GetGroups() {
			if g.GetGroup() == group {
				backlog = g.GetBacklog()
			}
		}
	}
	assert.Equal(t, int64(0), backlog, "backlog of %s after the run: every message acknowledged", group)
}
