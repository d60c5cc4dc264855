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
// client did not send, and a copy only where an answer was lost. It holds
// whether the broker deduplicates by message id or stores every copy, as
// the Apache proxy does:
//
//   - every message reported sent is stored, and its receipt carries its
//     id;
//   - a message reported failed is stored only if one of its attempts got
//     no answer (its RPC failed: a dropped connection, a deadline), since a
//     refusal (42900, 50001) is answered before storing;
//   - a message is stored at most once more than the number of its
//     attempts whose answer was lost, and at most that many times when it
//     is reported failed;
//   - every stored message is one of the client's, and the distinct
//     messages stored are those reported sent and those failed but stored.
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
	storedFailed := 0 // reported failed, yet stored: an answer was lost
	for _, m := range s.Messages {
		require.NotEmpty(t, m.MessageID, "message %d: no SendMessage call carried it", m.Index)
		require.False(t, mine[m.MessageID], "message %d: id %s given to two messages", m.Index, m.MessageID)
		mine[m.MessageID] = true
		n, lost := stored[m.MessageID], m.lostAnswers()
		if m.OK {
			assert.GreaterOrEqual(t, n, 1, "message %d (%s): reported sent; times stored", m.Index, m.MessageID)
			assert.LessOrEqual(t, n, 1+lost, "message %d (%s): reported sent, %d answers lost; times stored", m.Index, m.MessageID, lost)
			if assert.NotNil(t, m.Receipt, "message %d: sent without a receipt", m.Index) {
				assert.Equal(t, m.MessageID, m.Receipt.MessageID, "message %d: receipt's message id", m.Index)
			}
			copies += max(n-1, 0)
			continue
		}
		require.NotNil(t, m.Error, "message %d: neither sent nor failed with an error", m.Index)
		assert.LessOrEqual(t, n, lost, "message %d (%s): reported failed (%s), %d answers lost; times stored", m.Index, m.MessageID, m.Error, lost)
		if n > 0 {
			storedFailed++
			copies += n - 1
		}
	}
	for id, n := range stored {
		assert.True(t, mine[id], "stored message %s (%d times) was not sent by the client", id, n)
	}
	assert.Len(t, stored, s.Sent+storedFailed, "distinct messages stored")
	t.Logf("stored %d distinct messages: %d reported sent, %d reported failed after a lost answer; %d copies beyond the first",
		len(stored), s.Sent, storedFailed, copies)
	return copies
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
