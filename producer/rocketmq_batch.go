package producer

import (
	"context"
	"strings"
	"time"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/apache/rocketmq/v2"
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

func (s *rmqBatch) sendBatch(ctx context.Context, b *batch) {
	n := len(b.entries)
	req := &rocketmqv2.SendMessageRequest{Messages: make([]*rocketmqv2.Message, n)}
	for i, e := range b.entries {
		e.v2.SystemProperties.QueueId = s.queue
		e.queue = s.queue
		req.Messages[i] = e.v2
	}
	var pr peer.Peer
	resp, err := s.cn.stub.SendMessage(s.c.outgoing(ctx), req, grpc.Peer(&pr), grpc.ForceCodecV2(batchCodec{b}))
	b.markEncoded()
	if err != nil {
		o := RocketMQClassifier.Classify(nil, err)
		if o.Kind == Permanent && n > 1 {
			splitAll(b)
			return
		}
		failAll(b, o, err, &pr, s.cn.addr)
		return
	}
	outs := classifyEntries(resp, n)
	if n > 1 && refusedWhole(resp, outs) {
		splitAll(b)
		return
	}
	entries := resp.GetEntries()
	var ids []string // the one entry's IDs, when it names every message
	if n > 1 && len(entries) == 1 {
		ids = s.batchIDs(entries[0].GetMessageId(), b)
	}
	for i, e := range b.entries {
		e.o = outs[i]
		var own *rocketmqv2.SendResultEntry
		switch {
		case n > 1 && len(entries) == 1:
			own = batchResult(entries[0], i, ids)
		case i < len(entries):
			own = entries[i]
		}
		if e.o.Kind == Permanent && n > 1 && own.GetStatus() == nil {
			// The request's status, not this message's.
			e.split = true
			continue
		}
		e.v2res = own
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
func (s *rmqBatch) batchIDs(id string, b *batch) []string {
	ids := strings.Split(id, ",")
	if len(ids) != len(b.entries) {
		return nil
	}
	for i, e := range b.entries {
		if ids[i] != e.id {
			s.c.logger.Warn("rocketmq: the answer to a batch names other message IDs than it holds",
				"endpoint", s.cn.addr, "message_id", e.id, "answered", ids[i], "index", i)
			return nil
		}
	}
	return ids
}

// batchResult is message i's result in the one entry answered for its
// batch: the entry's status and transaction id, the message's own ID (from
// ids when it names every message), and the queue offset first + i, since
// the broker gives the messages of a batch consecutive offsets from the
// one it answers (store/src/main/java/org/apache/rocketmq/store/CommitLog.java,
// DLedgerCommitLog.java: queueOffset + msgNum).
func batchResult(e *rocketmqv2.SendResultEntry, i int, ids []string) *rocketmqv2.SendResultEntry {
	r := &rocketmqv2.SendResultEntry{Status: e.GetStatus(), TransactionId: e.GetTransactionId(), Offset: e.GetOffset() + int64(i)}
	if ids != nil {
		r.MessageId = ids[i]
	}
	return r
}

// refusedWhole reports whether an apache.rocketmq.v2 answer refuses a
// request of several messages as a whole with a 4xxxx: its top status
// and every entry's outcome are the same Permanent code (as a broker
// answers a request over its batch limit, copying the status to each
// entry). It may also be every message bad alike; sent alone, each gets
// its own answer. A batch has one topic, so TOPIC_NOT_FOUND is true of
// every message and is not a whole refusal.
func refusedWhole(resp *rocketmqv2.SendMessageResponse, outs []Outcome) bool {
	top := resp.GetStatus().GetCode()
	if top == rocketmqv2.Code_TOPIC_NOT_FOUND || classifyStatus(resp.GetStatus()).Kind != Permanent {
		return false
	}
	for _, o := range outs {
		if o.Kind != Permanent || o.WireCode != int32(top) {
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
func (a *rmqCall) attemptBatched(ctx context.Context, q rmqQueue, cn *rmqConn, e *batchEntry, deadline time.Time) (o Outcome, unsent bool, at rmqQueue, ok bool) {
	bt := e.bt
	e.bt = nil // only the first attempt (never a wait-for-ready one) joins a batch
	e.v2 = a.msg
	sp := a.msg.GetSystemProperties()
	e.id = sp.GetMessageId()
	e.size = entrySize(sp.GetMessageId(), a.topic, sp.GetTag(), sp.GetKeys(), a.msg.GetUserProperties(), a.msg.GetBody())
	e.deadline = deadline // the batch's call ends by then, and so does the wait for it
	if e.deadline.IsZero() {
		e.deadline, _ = ctx.Deadline()
	}
	if !bt.join(batchKey{addr: q.addr, topic: a.topic}, &rmqBatch{c: a.c, cn: cn, queue: q.id}, e) {
		return Outcome{}, false, q, false
	}
	o, unsent, answered := bt.wait(ctx, e)
	if !answered {
		return o, unsent, q, true // where it may be; what the caller sees of it is unknown
	}
	if e.split {
		return Outcome{}, false, q, false
	}
	q.id = e.queue
	return e.o, e.unsent, q, true
}
