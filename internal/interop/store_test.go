package interop_test

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rocketry-go/rocketry/broker"
)

// checkStore checks the broker's store of topic against a client's
// summary (produce.js's or the Go client's produce program's), by message
// id: nothing lost without the client knowing, nothing stored that the
// client did not send, and a copy only where an outcome was unknown to the
// client. The broker's faithful face stores every copy, as the Apache proxy
// does (no deduplication by message id):
//
//   - every message reported sent is stored, and its receipt carries its
//     id;
//   - an attempt's outcome is unknown when it got no answer (its RPC
//     failed: a dropped connection, a deadline) or was answered 50001, which
//     a proxy answers after the broker stored a send too
//     (Faults.StoredInternalRate); a 42900 is answered before storing;
//   - a message is stored at most once more than the number of its
//     attempts whose outcome was unknown, and at most that many times when
//     it is reported failed;
//   - every stored message is one of the client's, and the distinct
//     messages stored are those reported sent and those failed but stored;
//   - the copies beyond the first of each message are the broker's own
//     count (TopicStats.Copies), and no more than the unknown outcomes the
//     client met.
//
// It logs the counts and returns the copies stored beyond the first of
// each message.
func checkStore(t *testing.T, b *broker.Broker, topic string, s summary, count int) (copies int) {
	t.Helper()
	require.Len(t, s.Messages, count, "messages in the summary")
	assert.Equal(t, count, s.Sent+s.Failed, "sent + failed")
	stored := map[string]int{}
	for _, m := range b.Messages(topic) {
		stored[m.GetMessage().GetMessageId()]++
	}
	mine := map[string]bool{}
	storedFailed := 0 // reported failed, yet stored: an outcome was unknown
	unknownAll := 0
	for _, m := range s.Messages {
		require.NotEmpty(t, m.MessageID, "message %d: no SendMessage call carried it", m.Index)
		require.False(t, mine[m.MessageID], "message %d: id %s given to two messages", m.Index, m.MessageID)
		mine[m.MessageID] = true
		n, unknown := stored[m.MessageID], m.unknownOutcomes()
		unknownAll += unknown
		if m.OK {
			assert.GreaterOrEqual(t, n, 1, "message %d (%s): reported sent; times stored", m.Index, m.MessageID)
			assert.LessOrEqual(t, n, 1+unknown, "message %d (%s): reported sent, %d outcomes unknown; times stored", m.Index, m.MessageID, unknown)
			if assert.NotNil(t, m.Receipt, "message %d: sent without a receipt", m.Index) {
				assert.Equal(t, m.MessageID, m.Receipt.MessageID, "message %d: receipt's message id", m.Index)
			}
			copies += max(n-1, 0)
			continue
		}
		require.NotNil(t, m.Error, "message %d: neither sent nor failed with an error", m.Index)
		assert.LessOrEqual(t, n, unknown, "message %d (%s): reported failed (%s), %d outcomes unknown; times stored", m.Index, m.MessageID, m.Error, unknown)
		if n > 0 {
			storedFailed++
			copies += n - 1
		}
	}
	for id, n := range stored {
		assert.True(t, mine[id], "stored message %s (%d times) was not sent by the client", id, n)
	}
	assert.Len(t, stored, s.Sent+storedFailed, "distinct messages stored")
	assert.Equal(t, int64(copies), topicCopies(b, topic), "copies: by message id against the broker's count")
	assert.LessOrEqual(t, copies, unknownAll, "copies against the unknown outcomes the client met")
	t.Logf("stored %d distinct messages: %d reported sent, %d reported failed after an unknown outcome; %d copies beyond the first (the broker's count: %d), %d unknown outcomes met",
		len(stored), s.Sent, storedFailed, copies, topicCopies(b, topic), unknownAll)
	return copies
}

// topicCopies is the broker's count of the messages of topic stored
// although their id was stored before.
func topicCopies(b *broker.Broker, topic string) int64 {
	for _, ts := range b.Stats().GetTopics() {
		if ts.GetTopic() == topic {
			return ts.GetCopies()
		}
	}
	return 0
}

// statedWaits is the first group of every match of re in a client's log:
// the waits it says it takes before its attempts.
func statedWaits(re *regexp.Regexp, log string) []string {
	var waits []string
	for _, m := range re.FindAllStringSubmatch(log, -1) {
		waits = append(waits, m[1])
	}
	return waits
}

// recordsOf is the broker's records of the attempts at message id.
func recordsOf(records []broker.SendRecord, id string) []broker.SendRecord {
	var rs []broker.SendRecord
	for _, r := range records {
		if r.MessageID == id {
			rs = append(rs, r)
		}
	}
	return rs
}
