package wirermq

import (
	"context"
	"encoding/binary"
	"slices"
	"strings"
	"time"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/producer/internal/batch"
	"github.com/rocketry-go/rocketry/producer/internal/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
)

// This file is the apache.rocketmq.v2 side of the batcher (batch.go): one
// SendMessage of a batch to a broker, and how its answer is read for each
// message.

// rmqBatch sends a batch to one broker, every message naming the queue of
// the batch's first one. (A RocketMQ 5 proxy ignores the queue a request
// names: it chooses the broker and queue itself, the same for every
// message of the request:
// proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/producer/SendMessageActivity.java
// SendMessageQueueSelector.)
type rmqBatch struct {
	c     *rmqClient
	cn    *rmqConn
	queue int32
}

// rmqItem is an apache.rocketmq.v2 message in a batch: its entry's payload.
type rmqItem struct {
	// msg is written by its send before it joins; the batch's goroutine
	// sets its queue (SendBatch) and reads it until the request is encoded.
	msg *rocketmqv2.Message
	// id is the message's ID, written by its send before it joins: the
	// batch reads it after the request is encoded.
	id string
	// res and queue are written by the batch's goroutine (SendBatch)
	// before the batch is done, and read by its send after: the message's
	// result (nil when none), and the queue the batch named.
	res   *rocketmqv2.SendResultEntry
	queue int32
}

// rmqEntry is an apache.rocketmq.v2 message in a batch.
type rmqEntry = batch.Entry[rmqItem, outcome.Outcome]

func (s *rmqBatch) SendBatch(ctx context.Context, b *batch.Batch[rmqItem, outcome.Outcome]) {
	es := b.Entries()
	n := len(es)
	req := &rocketmqv2.SendMessageRequest{Messages: make([]*rocketmqv2.Message, n)}
	for i, e := range es {
		e.Msg.msg.SystemProperties.QueueId = s.queue
		e.Msg.queue = s.queue
		req.Messages[i] = e.Msg.msg
	}
	var pr peer.Peer
	resp, err := s.cn.stub.SendMessage(s.c.outgoing(ctx), req, grpc.Peer(&pr), grpc.ForceCodecV2(wire.BatchCodec{B: b}))
	b.MarkEncoded()
	if err != nil {
		wire.FailAll(b, Classify(nil, err), err, &pr, s.cn.addr)
		return
	}
	outs := ClassifyEntries(resp, n)
	whole := n > 1 && refusedWhole(resp, outs) // the request's status, not any message's
	entries := resp.GetEntries()
	var ids []string // the one entry's IDs, when it names every message
	if n > 1 && len(entries) == 1 && !whole {
		ids = s.batchIDs(entries[0].GetMessageId(), es)
	}
	for i, e := range es {
		var own *rocketmqv2.SendResultEntry
		switch {
		case n > 1 && len(entries) == 1:
			own = batchResult(entries[0], i, ids)
		case i < len(entries):
			own = entries[i]
		}
		// An entry without a status of its own has the request's.
		o := outs[i]
		if b.Answer(e, o, !whole && own.GetStatus() != nil, wire.Refusal(o)) {
			e.Msg.res = own
		}
	}
}

// batchIDs reads the message_id of the one entry a proxy answers for a
// batch: in cluster mode the IDs of its messages joined by commas, in
// their order (client/src/main/java/org/apache/rocketmq/client/impl/MQClientAPIImpl.java
// processSendResponse, for a MessageBatch); in local mode one new ID for
// the whole batch
// (proxy/src/main/java/org/apache/rocketmq/proxy/service/message/LocalMessageService.java),
// returned as nil. A list that names other IDs than the batch's changes
// nothing of the outcome (the status is the request's, and the batch is
// stored whole or not at all, so sending any of it again would store it
// twice); it is logged.
func (s *rmqBatch) batchIDs(id string, es []*rmqEntry) []string {
	ids := strings.Split(id, ",")
	if len(ids) != len(es) {
		return nil
	}
	for i, e := range es {
		if ids[i] != e.Msg.id {
			s.c.logger.Warn("rocketmq: the answer to a batch names other message IDs than it holds",
				"endpoint", s.cn.addr, "message_id", e.Msg.id, "answered", ids[i], "index", i)
			return nil
		}
	}
	return ids
}

// batchResult is message i's result in the one entry answered for its
// batch: the entry's status and transaction id, the message's own ID (from
// ids when it names every message), and for an OK entry the queue offset
// first + i, since the broker gives the messages of a batch consecutive
// offsets from the one it answers (store/src/main/java/org/apache/rocketmq/store/CommitLog.java,
// DLedgerCommitLog.java: queueOffset + msgNum); an unconfirmed entry
// (rmqUnconfirmed) carries no offset, and its messages get none.
func batchResult(e *rocketmqv2.SendResultEntry, i int, ids []string) *rocketmqv2.SendResultEntry {
	r := &rocketmqv2.SendResultEntry{Status: e.GetStatus(), TransactionId: e.GetTransactionId()}
	if e.GetStatus().GetCode() == rocketmqv2.Code_OK {
		r.Offset = e.GetOffset() + int64(i)
	}
	if ids != nil {
		r.MessageId = ids[i]
	}
	return r
}

// refusedWhole reports whether an apache.rocketmq.v2 answer refuses a
// request of several messages as a whole with a 4xxxx: its top status
// and every entry's outcome are the same Permanent code (as a broker
// answers a request over its batch limit, copying the status to each
// entry), so that no entry's status is its own. It may also be every
// message bad alike; sent alone, each gets its own answer. Whether that
// splits the batch is batch.Split's to say (not for TOPIC_NOT_FOUND, true
// of every message of a batch's one topic).
func refusedWhole(resp *rocketmqv2.SendMessageResponse, outs []outcome.Outcome) bool {
	top := resp.GetStatus().GetCode()
	if ClassifyStatus(resp.GetStatus()).Kind != outcome.Permanent {
		return false
	}
	for _, o := range outs {
		if o.Kind != outcome.Permanent || o.WireCode != int32(top) {
			return false
		}
	}
	return true
}

// attemptBatched is the first attempt of an async send over
// apache.rocketmq.v2, to queue q's broker on cn: the message joins the
// batch of that broker and its topic. ok is false when the message goes
// alone instead.
//
// at is the queue of the attempt: q, or the batch's queue when the batch
// answered.
func (a *rmqCall) attemptBatched(ctx context.Context, q rmqQueue, cn *rmqConn, deadline time.Time) (o outcome.Outcome, unsent bool, at rmqQueue, ok bool) {
	bt := a.bt
	a.bt = nil // only the first attempt (never a wait-for-ready one) joins a batch
	props, ok := batchProps(a.msg)
	if !ok {
		return outcome.Outcome{}, false, q, false
	}
	sp := a.msg.GetSystemProperties()
	e := &rmqEntry{
		Msg:      rmqItem{msg: a.msg, id: sp.GetMessageId()},
		Size:     wire.EntrySize(sp.GetMessageId(), a.topic, sp.GetTag(), sp.GetKeys(), a.msg.GetUserProperties(), a.msg.GetBody()),
		Deadline: wire.BatchDeadline(ctx, deadline), // the batch's call ends by then, and so does the wait for it
	}
	if !batch.Join(bt, batch.Key{To: q.addr, Topic: a.topic, Props: props}, &rmqBatch{c: a.c, cn: cn, queue: q.id}, e) {
		return outcome.Outcome{}, false, q, false
	}
	a.be = e
	r, answered := batch.Wait(ctx, bt, e)
	switch {
	case !answered:
		return wire.CutShort(ctx), r.Unsent, q, true // where it may be; what the caller sees of it is unknown
	case r.Split:
		return outcome.Outcome{}, false, q, false
	}
	q.id = e.Msg.queue
	return r.Outcome, r.Unsent, q, true
}

// batchProps is the batch key (batch.Key's Props) of m: what a RocketMQ 5
// proxy stores as the properties of a whole batch, which must be the same
// for every message of one batch. The proxy sends a request of several
// messages to its broker as one SEND_BATCH_MESSAGE whose header carries
// the FIRST message's properties
// (proxy/src/main/java/org/apache/rocketmq/proxy/processor/ProducerProcessor.java
// buildSendMessageRequestHeader); the broker keeps them as the batch's
// (broker/src/main/java/org/apache/rocketmq/broker/processor/SendMessageProcessor.java
// sendBatchMessage) and writes them after each message's own properties
// (store/src/main/java/org/apache/rocketmq/store/MessageExtEncoder.java
// encode(MessageExtBatch)), where a reader takes the later value. A
// message's properties are the ones the proxy makes of it
// (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/producer/SendMessageActivity.java
// buildMessageProperty): its user properties, tag, keys, message ID, type,
// delivery time, trace context, born host and born time. So the messages
// of a batch agree on all of them but the ID, the born time (at most the
// linger apart) and the born host (the process's): the key is the tag,
// the keys in order, the user properties and the trace context.
//
// ok is false for a message that never joins a batch: a FIFO message (its
// message group is a property, and the proxy picks a batch's queue
// without it), a transactional one (which the producer never batches
// either), and a timed one: the broker would see the first message's
// delivery time on all of them, and its recall handle, which it makes of
// the batch's first message ID
// (broker/src/main/java/org/apache/rocketmq/broker/processor/SendMessageProcessor.java),
// would recall the first message only.
//
// A message with a tag alone is keyed by the tag itself, without an
// allocation; every other key starts with a 0 byte (as does a tag that
// starts with one) and spells each part with its length, so that two keys
// are equal only when the parts are.
func batchProps(m *rocketmqv2.Message) (string, bool) {
	sp := m.GetSystemProperties()
	if sp.GetMessageType() != rocketmqv2.MessageType_NORMAL || sp.DeliveryTimestamp != nil {
		return "", false
	}
	tag := sp.GetTag()
	if sp.TraceContext == nil && len(sp.GetKeys()) == 0 && len(m.GetUserProperties()) == 0 && !strings.HasPrefix(tag, "\x00") {
		return tag, true
	}
	b := make([]byte, 0, 64)
	b = append(b, 0)
	field := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	field(tag)
	field(sp.GetTraceContext())
	b = binary.AppendUvarint(b, uint64(len(sp.GetKeys())))
	for _, k := range sp.GetKeys() {
		field(k)
	}
	props := m.GetUserProperties()
	names := make([]string, 0, len(props))
	for k := range props {
		names = append(names, k)
	}
	slices.Sort(names)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, k := range names {
		field(k)
		field(props[k])
	}
	return string(b), true
}
