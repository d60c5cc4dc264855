package broker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"

	"github.com/rocketry-go/rocketry/broker"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
)

// txMsg is a TRANSACTION message.
func txMsg(topic, id string) *rocketmqv2.Message {
	m := v2msg(topic, id)
	m.SystemProperties.MessageType = rocketmqv2.MessageType_TRANSACTION
	return m
}

// endTx ends transaction txID of topic and returns its status.
func endTx(t testing.TB, c rocketmqv2.MessagingServiceClient, topic, msgID, txID string, res rocketmqv2.TransactionResolution) *rocketmqv2.Status {
	t.Helper()
	resp, err := c.EndTransaction(ctx(t), &rocketmqv2.EndTransactionRequest{
		Topic: &rocketmqv2.Resource{Name: topic}, MessageId: msgID, TransactionId: txID, Resolution: res,
		Source: rocketmqv2.TransactionSource_SOURCE_CLIENT,
	})
	require.NoError(t, err)
	return resp.GetStatus()
}

// TestRocketMQTransactionCommitRollback: half messages are invisible (not
// received, not in Messages, no backlog) until committed; a rollback drops
// them; an ended or unknown transaction is answered as the proxy does.
func TestRocketMQTransactionCommitRollback(t *testing.T) {
	b, _ := start(t, consumerOpts(broker.WithQueues(1))...)
	c := dialV2(t, b.Addr())
	receiveV2(t, c, "t", "g", 10, time.Minute) // the group exists: backlog counts from here

	commit := v2send(t, c, txMsg("t", "commit-me")).Entries[0]
	rollback := v2send(t, c, txMsg("t", "roll-me-back")).Entries[0]
	require.Equal(t, rocketmqv2.Code_OK, v2put(t, c, v2msg("t", "normal")))
	require.NotEmpty(t, commit.TransactionId)
	require.NotEqual(t, commit.TransactionId, rollback.TransactionId, "each transaction has its own id")
	assert.Equal(t, int64(-1), commit.Offset, "offset of a half message")
	assert.Empty(t, commit.RecallHandle)

	assert.Equal(t, []string{"normal"}, receiveV2(t, c, "t", "g", 10, time.Minute).ids(), "receive before the end of the transactions")
	ms := b.Messages("t")
	require.Len(t, ms, 1, "Messages lists no half message")
	assert.Len(t, b.HalfMessages("t"), 2)
	assert.Equal(t, int64(1), groupBacklog(b, "t", "g"), "half messages are no backlog")

	// An open transaction stays open after an UNKNOWN end.
	assert.Equal(t, rocketmqv2.Code_OK, endTx(t, c, "t", "commit-me", commit.TransactionId, rocketmqv2.TransactionResolution_TRANSACTION_RESOLUTION_UNSPECIFIED).GetCode())
	assert.Len(t, b.HalfMessages("t"), 2)

	require.Equal(t, rocketmqv2.Code_OK, endTx(t, c, "t", "commit-me", commit.TransactionId, rocketmqv2.TransactionResolution_COMMIT).GetCode())
	require.Equal(t, rocketmqv2.Code_OK, endTx(t, c, "t", "roll-me-back", rollback.TransactionId, rocketmqv2.TransactionResolution_ROLLBACK).GetCode())
	assert.Equal(t, []string{"commit-me"}, receiveV2(t, c, "t", "g2", 10, time.Minute).ids()[1:], "a new group receives the committed message after the normal one")
	assert.Empty(t, b.HalfMessages("t"))
	ms = b.Messages("t")
	require.Len(t, ms, 2)
	assert.Equal(t, "commit-me", ms[1].GetMessage().GetMessageId())
	assert.True(t, ms[1].GetMessage().GetTransactional())
	assert.Equal(t, int64(1), ms[1].GetOffset(), "the committed message joins its queue at commit")

	for name, tc := range map[string]struct {
		topic, txID string
		res         rocketmqv2.TransactionResolution
		want        rocketmqv2.Code
		text        string
	}{
		"committed again":        {"t", commit.TransactionId, rocketmqv2.TransactionResolution_COMMIT, rocketmqv2.Code_INTERNAL_SERVER_ERROR, "cannot found transaction data"},
		"rolled back, committed": {"t", rollback.TransactionId, rocketmqv2.TransactionResolution_COMMIT, rocketmqv2.Code_INTERNAL_SERVER_ERROR, "cannot found transaction data"},
		"unknown":                {"t", "nope", rocketmqv2.TransactionResolution_ROLLBACK, rocketmqv2.Code_INTERNAL_SERVER_ERROR, "cannot found transaction data"},
		"unknown topic":          {"other", commit.TransactionId, rocketmqv2.TransactionResolution_COMMIT, rocketmqv2.Code_INTERNAL_SERVER_ERROR, "cannot found transaction data"},
		"blank id":               {"t", " ", rocketmqv2.TransactionResolution_COMMIT, rocketmqv2.Code_INVALID_TRANSACTION_ID, "transaction id cannot be empty"},
		"bad topic":              {"a b", commit.TransactionId, rocketmqv2.TransactionResolution_COMMIT, rocketmqv2.Code_ILLEGAL_TOPIC, ""},
	} {
		st := endTx(t, c, tc.topic, "x", tc.txID, tc.res)
		assert.Equal(t, tc.want, st.GetCode(), name)
		assert.Contains(t, st.GetMessage(), tc.text, name)
	}
	assert.Equal(t, []string{"commit-me"}, receiveV2(t, c, "t", "g", 10, time.Minute).ids(), "the first group gets the committed message, never the rolled back one")
	assert.Empty(t, receiveV2(t, c, "t", "g3", 10, time.Minute).ids()[2:], "nothing after the two visible messages")
}

// TestRocketMQTransactionCommitTimed: a committed half message with a
// delivery time still to come waits in the timer.
func TestRocketMQTransactionCommitTimed(t *testing.T) {
	clock := newFakeClock()
	b, _ := start(t, consumerOpts(broker.WithQueues(1), broker.WithClock(clock.Now))...)
	c := dialV2(t, b.Addr())
	m := txMsg("t", "later")
	m.SystemProperties.DeliveryTimestamp = timedMsg("t", "x", clock.Now().Add(time.Hour)).SystemProperties.DeliveryTimestamp
	e := v2send(t, c, m).Entries[0]
	require.Equal(t, rocketmqv2.Code_OK, endTx(t, c, "t", "later", e.TransactionId, rocketmqv2.TransactionResolution_COMMIT).GetCode())
	assert.Empty(t, receiveV2(t, c, "t", "g", 10, time.Minute).ids())
	clock.Advance(time.Hour)
	assert.Equal(t, []string{"later"}, receiveV2(t, c, "t", "g", 10, time.Minute).ids())
}

// producerStream opens a producer's Telemetry stream as client id,
// publishing topic, and returns a channel of the checks it receives.
func producerStream(t *testing.T, c rocketmqv2.MessagingServiceClient, id, topic string) <-chan *rocketmqv2.RecoverOrphanedTransactionCommand {
	t.Helper()
	out, _ := producerStreamSettings(t, c, id, topic)
	return out
}

// producerStreamSettings is producerStream with a function that sends the
// producer's Settings again, publishing topics.
func producerStreamSettings(t *testing.T, c rocketmqv2.MessagingServiceClient, id string, topics ...string) (<-chan *rocketmqv2.RecoverOrphanedTransactionCommand, func(topics ...string)) {
	t.Helper()
	sctx := metadata.AppendToOutgoingContext(ctx(t), "x-mq-client-id", id)
	stream, err := c.Telemetry(sctx)
	require.NoError(t, err)
	settings := func(topics ...string) *rocketmqv2.TelemetryCommand {
		pub := &rocketmqv2.Publishing{}
		for _, tp := range topics {
			pub.Topics = append(pub.Topics, &rocketmqv2.Resource{Name: tp})
		}
		return &rocketmqv2.TelemetryCommand{Command: &rocketmqv2.TelemetryCommand_Settings{Settings: &rocketmqv2.Settings{
			ClientType: rocketmqv2.ClientType_PRODUCER.Enum(),
			PubSub:     &rocketmqv2.Settings_Publishing{Publishing: pub},
		}}}
	}
	require.NoError(t, stream.Send(settings(topics...)))
	first, err := stream.Recv()
	require.NoError(t, err)
	require.NotNil(t, first.GetSettings(), "the broker answers the Settings first")
	out := make(chan *rocketmqv2.RecoverOrphanedTransactionCommand, 100)
	answers := make(chan struct{}, 100)
	go func() {
		defer close(out)
		for {
			cmd, err := stream.Recv()
			if err != nil {
				return
			}
			if r := cmd.GetRecoverOrphanedTransactionCommand(); r != nil {
				out <- r
			}
			if cmd.GetSettings() != nil {
				answers <- struct{}{}
			}
		}
	}()
	t.Cleanup(func() { _ = stream.CloseSend() })
	resend := func(topics ...string) {
		require.NoError(t, stream.Send(settings(topics...)))
		select { // the broker has read them once it answers
		case <-answers:
		case <-ctx(t).Done():
			t.Fatal("no answer to the new Settings before the test's deadline")
		}
	}
	return out, resend
}

// TestRocketMQTransactionCheck: an orphaned transaction is checked on its
// producer's Telemetry stream, and the answer of the check (source
// SOURCE_SERVER_CHECK) resolves it; a transaction nobody resolves is
// checked maxChecks times, then rolled back.
func TestRocketMQTransactionCheck(t *testing.T) {
	b, _ := start(t, consumerOpts(broker.WithQueues(1), broker.WithTransactionCheck(20*time.Millisecond, 3))...)
	c := dialV2(t, b.Addr())
	checks := producerStream(t, c, "producer-1", "t")
	sctx := metadata.AppendToOutgoingContext(ctx(t), "x-mq-client-id", "producer-1")

	resp, err := c.SendMessage(sctx, &rocketmqv2.SendMessageRequest{Messages: []*rocketmqv2.Message{txMsg("t", "orphan")}})
	require.NoError(t, err)
	txID := resp.GetEntries()[0].GetTransactionId()
	var cmd *rocketmqv2.RecoverOrphanedTransactionCommand
	select {
	case cmd = <-checks:
	case <-ctx(t).Done():
		t.Fatal("no RecoverOrphanedTransactionCommand before the test's deadline")
	}
	assert.Equal(t, txID, cmd.GetTransactionId())
	assert.Equal(t, "orphan", cmd.GetMessage().GetSystemProperties().GetMessageId())
	assert.Equal(t, rocketmqv2.MessageType_TRANSACTION, cmd.GetMessage().GetSystemProperties().GetMessageType())
	assert.Equal(t, "t", cmd.GetMessage().GetTopic().GetName())
	et, err := c.EndTransaction(sctx, &rocketmqv2.EndTransactionRequest{
		Topic: &rocketmqv2.Resource{Name: "t"}, MessageId: "orphan", TransactionId: cmd.GetTransactionId(),
		Resolution: rocketmqv2.TransactionResolution_COMMIT, Source: rocketmqv2.TransactionSource_SOURCE_SERVER_CHECK,
	})
	require.NoError(t, err)
	require.Equal(t, rocketmqv2.Code_OK, et.GetStatus().GetCode())
	assert.Equal(t, []string{"orphan"}, receiveV2(t, c, "t", "g", 10, time.Minute).ids(), "committed by the check's answer")

	// Nobody answers: checked 3 times, then rolled back.
	for len(checks) > 0 {
		<-checks
	}
	resp, err = c.SendMessage(sctx, &rocketmqv2.SendMessageRequest{Messages: []*rocketmqv2.Message{txMsg("t", "forgotten")}})
	require.NoError(t, err)
	forgotten := resp.GetEntries()[0].GetTransactionId()
	require.Eventually(t, func() bool { return len(b.HalfMessages("t")) == 0 }, 10*time.Second, 5*time.Millisecond, "rolled back after its checks")
	n := 0
	for len(checks) > 0 {
		got := <-checks
		assert.Equal(t, forgotten, got.GetTransactionId())
		n++
	}
	assert.Equal(t, 3, n, "checks of the forgotten transaction")
	assert.Equal(t, rocketmqv2.Code_INTERNAL_SERVER_ERROR, endTx(t, c, "t", "forgotten", forgotten, rocketmqv2.TransactionResolution_COMMIT).GetCode(), "a commit after the roll back")
	assert.Empty(t, receiveV2(t, c, "t", "g", 10, time.Minute).ids())
}

// TestRocketMQRecall: a timed message's receipt carries a recall handle;
// recalled before its delivery time, it is never delivered; a due,
// malformed or foreign handle is refused with the proxy's code.
func TestRocketMQRecall(t *testing.T) {
	clock := newFakeClock()
	b, _ := start(t, consumerOpts(broker.WithQueues(1), broker.WithClock(clock.Now), broker.WithTopicType("normal", broker.TopicNormal))...)
	c := dialV2(t, b.Addr())
	at := clock.Now().Add(time.Hour)
	gone := v2send(t, c, timedMsg("t", "recalled", at)).Entries[0]
	kept := v2send(t, c, timedMsg("t", "kept", at)).Entries[0]
	require.NotEmpty(t, gone.RecallHandle)
	assert.Empty(t, v2send(t, c, v2msg("t", "now")).Entries[0].RecallHandle, "a message that is not timed has no recall handle")

	recall := func(topic, handle string) *rocketmqv2.RecallMessageResponse {
		resp, err := c.RecallMessage(ctx(t), &rocketmqv2.RecallMessageRequest{Topic: &rocketmqv2.Resource{Name: topic}, RecallHandle: handle})
		require.NoError(t, err)
		return resp
	}
	r := recall("t", gone.RecallHandle)
	require.Equal(t, rocketmqv2.Code_OK, r.GetStatus().GetCode(), r.GetStatus().GetMessage())
	assert.Equal(t, "recalled", r.GetMessageId())
	assert.Len(t, b.Messages("t"), 2, "the recalled message is gone")
	assert.Equal(t, rocketmqv2.Code_OK, recall("t", gone.RecallHandle).GetStatus().GetCode(), "recalled twice: the broker writes its marker again")

	for name, tc := range map[string]struct {
		topic, handle string
		want          rocketmqv2.Code
		text          string
	}{
		"malformed":   {"t", "not a handle", rocketmqv2.Code_INTERNAL_SERVER_ERROR, "recall handle is invalid"},
		"empty":       {"t", "", rocketmqv2.Code_INTERNAL_SERVER_ERROR, "recall handle is invalid"},
		"other topic": {"t2", kept.RecallHandle, rocketmqv2.Code_TOPIC_NOT_FOUND, "not exist"},
		"bad topic":   {"a b", kept.RecallHandle, rocketmqv2.Code_ILLEGAL_TOPIC, ""},
		"typed topic": {"normal", kept.RecallHandle, rocketmqv2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "DELAY"},
	} {
		st := recall(tc.topic, tc.handle).GetStatus()
		assert.Equal(t, tc.want, st.GetCode(), name)
		assert.Contains(t, st.GetMessage(), tc.text, name)
	}
	require.Equal(t, rocketmqv2.Code_OK, v2put(t, c, v2msg("t2", "x")))
	st := recall("t2", kept.RecallHandle).GetStatus()
	assert.Equal(t, rocketmqv2.Code_INTERNAL_SERVER_ERROR, st.GetCode())
	assert.Equal(t, "recall failed, topic not match", st.GetMessage())

	clock.Advance(time.Hour)
	st = recall("t", kept.RecallHandle).GetStatus()
	assert.Equal(t, rocketmqv2.Code_INTERNAL_SERVER_ERROR, st.GetCode(), "recall at the delivery time")
	assert.Equal(t, "recall failed, timestamp invalid", st.GetMessage())
	assert.Equal(t, []string{"now", "kept"}, receiveV2(t, c, "t", "g", 10, time.Minute).ids(), "the recalled message is never delivered")
}

// TestRocketMQTransactionCheckGoesToAPublisher: when the producer that
// sent a half message is gone, the check goes to another producer
// publishing the topic (declared in Settings it sent after its first),
// not to one publishing another topic.
func TestRocketMQTransactionCheckGoesToAPublisher(t *testing.T) {
	b, _ := start(t, consumerOpts(broker.WithQueues(1), broker.WithTransactionCheck(20*time.Millisecond, 100))...)
	c := dialV2(t, b.Addr())
	elsewhere := producerStream(t, c, "other-topic", "u")
	publisher, publish := producerStreamSettings(t, c, "publisher") // no topic yet, as a producer starts
	publish("t")
	sctx := metadata.AppendToOutgoingContext(ctx(t), "x-mq-client-id", "gone")
	resp, err := c.SendMessage(sctx, &rocketmqv2.SendMessageRequest{Messages: []*rocketmqv2.Message{txMsg("t", "orphan")}})
	require.NoError(t, err)
	select {
	case cmd := <-publisher:
		assert.Equal(t, resp.GetEntries()[0].GetTransactionId(), cmd.GetTransactionId())
	case <-ctx(t).Done():
		t.Fatal("no check on the publisher's stream before the test's deadline")
	}
	assert.Empty(t, elsewhere, "checks on the stream of a producer of another topic")
}
