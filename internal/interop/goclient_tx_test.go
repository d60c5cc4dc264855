package interop_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rocketry-go/rocketry/broker"
)

// goTxSummary is goclient/cmd/tx's JSON summary: tx.js's without recall,
// plus the EndTransaction calls the program's interceptor saw.
type goTxSummary struct {
	txSummary
	Ends []struct {
		MessageID     string       `json:"messageId"`
		TransactionID string       `json:"transactionId"`
		Resolution    string       `json:"resolution"`
		Source        string       `json:"source"`
		Code          int          `json:"code"`
		Error         *clientError `json:"error"`
	} `json:"ends"`
	EmptyReceives int `json:"emptyReceives"`
	Pair          *struct {
		ThirdError *clientError `json:"thirdError"`
	} `json:"pair"`
}

// TestOfficialGoTransactions is TestOfficialNodeTransactionsAndRecall with
// the official Go client (5.1.2), without recall, which it does not have:
// a committed message reaches its SimpleConsumer, a rolled back one never
// does, and the two transactions left open are resolved through its
// TransactionChecker, which the broker's check (every 500 ms) calls over
// the Telemetry stream: one answers COMMIT (received), the other ROLLBACK
// (never received). One transaction takes two messages (both committed
// and received), not the one the client means, and refuses the third.
// Every EndTransaction the client sends, the checker's
// answers included, carries no source (SOURCE_UNSPECIFIED): the broker
// applies it all the same, as the proxy does (see doc.go, Go client:
// transactions).
func TestOfficialGoTransactions(t *testing.T) {
	const topic = "interop-tx"
	prog := buildGoProgram(t, "tx")
	b, _ := startTLSBroker(t,
		broker.WithTopicType(topic, broker.TopicTransaction),
		broker.WithTransactionCheck(500*time.Millisecond, 5),
		broker.WithLongPolling(100*time.Millisecond, 200*time.Millisecond),
	)
	s, stderr := runGoTx(t, prog, "--endpoint", b.Addr(), "--topic", topic, "--await", "200ms")
	t.Logf("client %s %s: %d checks, %d EndTransaction calls, %d events, %d Receive calls answered 40401, %d lines on stderr",
		s.Client.Package, s.Client.Version, len(s.Checks), len(s.Ends), len(s.Events), s.EmptyReceives, strings.Count(stderr, "\n"))
	require.Empty(t, s.Errors, "the program's failed steps")
	require.Empty(t, s.Error, "the program's error")
	assert.Empty(t, s.ReceiveErrors, "receive errors")
	if s.ShutdownError != nil {
		t.Errorf("GracefulStop() = %v; want success", s.ShutdownError)
	}

	sent := map[string]txSent{}
	byTx := map[string]string{} // transaction id -> key
	for _, m := range s.Sent {
		sent[m.Key] = m
		byTx[m.TransactionID] = m.Key
	}
	for _, key := range []string{"commit", "rollback", "orphan-commit", "orphan-rollback"} {
		assert.NotEmpty(t, sent[key].TransactionID, "transaction id of %s", key)
	}

	checked := map[string]string{}
	for _, c := range s.Checks {
		checked[c.Key] = c.Resolution
	}
	assert.Equal(t, map[string]string{"orphan-commit": "COMMIT", "orphan-rollback": "ROLLBACK"}, checked,
		"the checker's calls: the open transactions, not the ended ones")

	// Every EndTransaction: the caller's two and the checker's two, each
	// answered OK once, none with a source.
	ends := map[string]string{}
	for _, e := range s.Ends {
		key := byTx[e.TransactionID]
		assert.Nil(t, e.Error, "EndTransaction of %s failed", key)
		assert.Equal(t, 20000, e.Code, "the broker's answer to EndTransaction %s of %s", e.Resolution, key)
		assert.Equal(t, "SOURCE_UNSPECIFIED", e.Source, "the source of EndTransaction of %s", key)
		assert.Equal(t, sent[key].MessageID, e.MessageID, "the message id of EndTransaction of %s", key)
		assert.NotContains(t, ends, key, "a second EndTransaction of %s", key)
		ends[key] = e.Resolution
	}
	assert.Equal(t, map[string]string{
		"commit": "COMMIT", "rollback": "ROLLBACK", "orphan-commit": "COMMIT", "orphan-rollback": "ROLLBACK",
		"pair-1": "COMMIT", "pair-2": "COMMIT",
	}, ends, "EndTransaction calls, by message key")
	// One transaction takes two messages, not one, and refuses the third.
	assert.NotEmpty(t, sent["pair-1"].TransactionID, "transaction id of pair-1")
	assert.NotEmpty(t, sent["pair-2"].TransactionID, "transaction id of pair-2")
	assert.NotContains(t, sent, "pair-3", "the third message of one transaction sent")
	if assert.NotNil(t, s.Pair, "the pair's result") && assert.NotNil(t, s.Pair.ThirdError, "the third message of one transaction: want an error") {
		assert.Contains(t, s.Pair.ThirdError.Message, "exceeded the threshold: 1", "the third message's error")
	}

	acks := map[string]int{}
	for _, e := range s.Events {
		switch e.Kind {
		case "receive":
			assert.Contains(t, []string{"commit", "orphan-commit", "pair-1", "pair-2"}, e.Key, "received %s (%s)", e.Key, e.MessageID)
		case "ack":
			acks[e.Key]++
		default:
			t.Errorf("%s of %s: %v", e.Kind, e.Key, e.Error)
		}
	}
	assert.Equal(t, map[string]int{"commit": 1, "orphan-commit": 1, "pair-1": 1, "pair-2": 1}, acks, "acknowledged messages")
	assert.Empty(t, b.HalfMessages(topic), "open transactions at the end")
	var visible []string
	for _, m := range b.Messages(topic) {
		visible = append(visible, m.GetMessage().GetKeys()...)
	}
	assert.ElementsMatch(t, []string{"commit", "orphan-commit", "pair-1", "pair-2"}, visible, "the topic's stored messages (keys)")
	if t.Failed() {
		t.Logf("tx stderr (last 4 KiB):\n%s", tail(stderr, 4096))
	}
}

// runGoTx runs goclient/cmd/tx with args and returns its summary and
// stderr. It fails the test when the program does not exit 0 with a
// summary.
func runGoTx(t *testing.T, prog string, args ...string) (goTxSummary, string) {
	t.Helper()
	var s goTxSummary
	return s, runProgram(t, "tx", goProduceTimeout, append([]string{prog}, args...), nil, &s)
}
