package interop_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
)

// TestOfficialNodeTransactionsAndRecall runs tx.js: the official Node.js
// client's transactions and recall against the bundled broker, its
// SimpleConsumer reading the topic back. A committed message is received;
// a rolled back one never is; the two transactions the script leaves open
// are resolved through its transaction checker, which the broker's check
// calls over the Telemetry stream (one answers COMMIT, received; the
// other ROLLBACK, never received); a timed message recalled before its
// delivery time is never received while its twin, due at the same time,
// is; a malformed recall handle is refused with 50001.
func TestOfficialNodeTransactionsAndRecall(t *testing.T) {
	const topic = "interop-tx"
	nodeModules := installClient(t)
	b := brokertest.Start(t,
		broker.WithTransactionCheck(300*time.Millisecond, 5),
		broker.WithLongPolling(100*time.Millisecond, 2*time.Second),
	)
	s, stderr := runTx(t, nodeModules, "--endpoint", b.Addr(), "--topic", topic, "--timed-delay-ms", "1500", "--await-ms", "200")
	t.Logf("client %s %s: %d checks, %d events, %d lines on stderr", s.Client.Package, s.Client.Version, len(s.Checks), len(s.Events), strings.Count(stderr, "\n"))
	require.Empty(t, s.Errors, "the script's failed steps")
	require.Empty(t, s.Error, "the script's error")
	assert.Empty(t, s.ReceiveErrors, "receive errors")
	if s.ShutdownError != nil {
		t.Errorf("shutdown() = %v; want success", s.ShutdownError)
	}

	sent := map[string]txSent{}
	for _, m := range s.Sent {
		sent[m.Key] = m
	}
	for _, key := range []string{"commit", "rollback", "orphan-commit", "orphan-rollback"} {
		assert.NotEmpty(t, sent[key].TransactionID, "transaction id of %s", key)
	}
	for _, key := range []string{"recalled", "kept"} {
		assert.NotEmpty(t, sent[key].RecallHandle, "recall handle of timed message %s", key)
	}
	require.NotNil(t, s.Recalled, "the recall's receipt")
	assert.Equal(t, sent["recalled"].MessageID, s.Recalled.MessageID, "the recall's message id")
	require.NotNil(t, s.BadRecallError, "a malformed recall handle: want an error")
	assert.Contains(t, s.BadRecallError.Message, "code: 50001", "a malformed recall handle's error")

	checked := map[string]string{}
	for _, c := range s.Checks {
		checked[c.Key] = c.Resolution
	}
	assert.Equal(t, map[string]string{"orphan-commit": "COMMIT", "orphan-rollback": "ROLLBACK"}, checked,
		"the checker's calls: the open transactions, not the ended ones")

	acks := map[string]int{}
	for _, e := range s.Events {
		switch e.Kind {
		case "receive":
			assert.Contains(t, []string{"commit", "orphan-commit", "kept"}, e.Key, "received %s (%s)", e.Key, e.MessageID)
			if e.Key == "kept" {
				assert.GreaterOrEqual(t, e.AtMs, sent["kept"].DeliverAtMs, "the timed message received before its delivery time")
			}
		case "ack":
			acks[e.Key]++
		default:
			t.Errorf("%s of %s: %v", e.Kind, e.Key, e.Error)
		}
	}
	assert.Equal(t, map[string]int{"commit": 1, "orphan-commit": 1, "kept": 1}, acks, "acknowledged messages")
	assert.Empty(t, b.HalfMessages(topic), "open transactions at the end")
	var visible []string
	for _, m := range b.Messages(topic) {
		visible = append(visible, m.GetMessage().GetKeys()...)
	}
	assert.ElementsMatch(t, []string{"commit", "orphan-commit", "kept"}, visible, "the topic's stored messages (keys)")
}

// txSummary is tx.js's JSON summary.
type txSummary struct {
	Client struct {
		Package string `json:"package"`
		Version string `json:"version"`
	} `json:"client"`
	Error         string        `json:"error"`
	StartupError  *clientError  `json:"startupError"`
	ShutdownError *clientError  `json:"shutdownError"`
	Sent          []txSent      `json:"sent"`
	Errors        []txStepError `json:"errors"`
	Checks        []txCheckCall `json:"checks"`
	Recalled      *struct {
		MessageID string `json:"messageId"`
	} `json:"recalled"`
	BadRecallError *clientError  `json:"badRecallError"`
	ReceiveErrors  []clientError `json:"receiveErrors"`
	Events         []txEvent     `json:"events"`
}

type txSent struct {
	Key           string `json:"key"`
	MessageID     string `json:"messageId"`
	TransactionID string `json:"transactionId"`
	RecallHandle  string `json:"recallHandle"`
	DeliverAtMs   int64  `json:"deliverAtMs"`
}

type txStepError struct {
	Step  string       `json:"step"`
	Error *clientError `json:"error"`
}

type txCheckCall struct {
	Key        string `json:"key"`
	MessageID  string `json:"messageId"`
	Resolution string `json:"resolution"`
}

type txEvent struct {
	Kind      string       `json:"kind"`
	Key       string       `json:"key"`
	MessageID string       `json:"messageId"`
	AtMs      int64        `json:"atMs"`
	Error     *clientError `json:"error"`
}

// runTx runs tx.js with args and returns its summary and stderr. It fails
// the test when the script does not exit 0 with a summary.
func runTx(t *testing.T, nodeModules string, args ...string) (txSummary, string) {
	t.Helper()
	argv, env := nodeArgv(t, nodeModules, "tx.js", args...)
	var s txSummary
	return s, runProgram(t, "node tx.js", nodeTimeout, argv, env, &s)
}
