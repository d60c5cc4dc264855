package broker

import (
	"context"
	"fmt"
	"maps"
	"strings"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// SendMessage is the apache.rocketmq.v2 face of the send core (the one
// rocketry.v1 SendMessage uses: validate, faults, throttle, store). It
// answers as the RocketMQ 5 proxy does
// (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/producer/SendMessageActivity.java
// and proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/GrpcMessagingApplication.java):
//
//   - stored: gRPC OK with status 20000 OK and ONE SendResultEntry
//     however many messages the request carries, for they are stored
//     together, atomically, on one queue (the proxy sends them as one
//     SEND_BATCH_MESSAGE and gets one SendResult). Its message_id is the
//     messages' ids joined by commas (a single message: its id; in
//     ProxyLocal mode a new id for a batch), its offset the first
//     message's, its status message "OK".
//   - refused: gRPC OK with a status and no entry, the whole request
//     refused and nothing of it stored: the proxy's validation (see
//     checkRocketMQTopic and checkRocketMQMessage; 40016 MESSAGE_CORRUPTED
//     for a request without messages, 40000 for more than WithMaxBatch),
//     40402 TOPIC_NOT_FOUND, 42900 TOO_MANY_REQUESTS when throttled or
//     busy (the text starts with the reason's tag: [BACKLOG],
//     [STORAGE_LOAD], [SEND_RATE], or the send queue's
//     [TIMEOUT_CLEAN_QUEUE] and [OVERLOAD], see SendQueue; no retry hint),
//     50001 INTERNAL_SERVER_ERROR for an injected INTERNAL fault. In
//     ProxyLocal mode a throttled or busy request is 50001 too.
//
// The broker picks the queue, not the client (whose queue_id is ignored):
// a single message with a message group goes to the queue the proxy's
// hash picks (groupQueue), any other request to the next queue in turn.
// A message is stored again when sent again, as a RocketMQ broker does:
// the answer is OK and Stats counts the copy; WithRocketMQDedup answers a
// remembered id as stored instead (the entry's offset is the original's).
// The rest of the injected faults answer as on rocketry.v1, with a gRPC
// error and no body: UNAVAILABLE (including a dropped connection), or the
// caller's deadline for a blackhole.
//
// The messages of a request of several are stored as a RocketMQ 5 broker
// stores a proxy's batch: each reads the first one's tag, keys and user
// properties over its own (batchProperties).
//
// Messages are stored as rocketry.v1 messages, readable by ConsumerService
// and Broker.Messages: system_properties.message_id, tag, keys,
// message_group and delivery_timestamp become the message's id, tag, keys,
// message_group and delivery_time, user_properties its properties, body
// its body as sent (a GZIP body stays compressed), and message_type
// TRANSACTION sets transactional. The other system properties and the
// topic's resource_namespace are not kept.
func (s rocketmqServer) SendMessage(ctx context.Context, req *rocketmqv2.SendMessageRequest) (*rocketmqv2.SendMessageResponse, error) {
	b := s.b
	in := req.GetMessages()
	sr := sendRequest{
		protocol: ProtocolRocketMQV2,
		msgs:     make([]*rocketryv1.Message, len(in)),
		invalid:  make([]*refusal, len(in)),
		whole:    true,
		oneQueue: true,
		noDedup:  !b.cfg.rocketmqDedup,
		queued:   true,
	}
	if len(in) == 0 {
		b.sendRequests.Add(1)
		b.sendRequestsV2.Add(1)
		b.badRequests.Add(1)
		return &rocketmqv2.SendMessageResponse{Status: v2Status(rocketmqv2.Code_MESSAGE_CORRUPTED, "no message to send")}, nil
	}
	topicRefusal := checkRocketMQTopic(in[0].GetTopic().GetName())
	now := b.now()
	for i, m := range in {
		sr.msgs[i] = fromV2(m)
		switch {
		case topicRefusal != nil:
			sr.invalid[i] = topicRefusal
		case m != nil:
			sr.invalid[i] = b.checkRocketMQMessage(m, in[0].GetTopic(), now)
		}
	}
	if len(in) > 1 {
		batchProperties(sr.msgs)
	}
	if len(in) == 1 {
		if g := in[0].GetSystemProperties().GetMessageGroup(); g != "" {
			sr.queues = []int32{int32(groupQueue(g, b.cfg.queues))}
		}
	}
	sr.extras = v2Extras(in)
	sr.tx = b.newTxStart(ctx, in)
	whole, res := b.send(ctx, sr)
	if sr.tx != nil {
		b.startTxChecker() // a fault may answer a held half message as failed
	}
	if whole == nil {
		for i := range res {
			if whole = res[i].refused; whole != nil {
				break
			}
		}
	}
	if whole != nil {
		if whole.code == rocketryv1.Code_CODE_UNAVAILABLE {
			return nil, whole.status() // the call failed: no body
		}
		return &rocketmqv2.SendMessageResponse{Status: b.v2StatusOf(whole)}, nil
	}
	e := &rocketmqv2.SendResultEntry{Status: v2OK(), Offset: res[0].offset, MessageId: b.batchID(sr.msgs)}
	if sr.tx != nil { // half messages, held until EndTransaction (rocketmq_tx.go)
		e.TransactionId = sr.tx.id
	} else if len(in) == 1 {
		e.RecallHandle = b.recallHandle(in[0], res[0].placement) // rocketmq_recall.go
	}
	return &rocketmqv2.SendMessageResponse{Status: v2OK(), Entries: []*rocketmqv2.SendResultEntry{e}}, nil
}

// batchID is the message_id of the one entry of a stored request: the id
// of a single message; for a batch the ids joined by commas, as the
// remoting client reports a batch's SendResult in cluster mode
// (client/src/main/java/org/apache/rocketmq/client/impl/MQClientAPIImpl.java,
// processSendResponse), or in local mode a new id the proxy gives the
// batch (MessageClientIDSetter.setUniqID on the MessageBatch in
// proxy/src/main/java/org/apache/rocketmq/proxy/service/message/LocalMessageService.java).
func (b *Broker) batchID(msgs []*rocketryv1.Message) string {
	if len(msgs) == 1 {
		return msgs[0].MessageId
	}
	if b.cfg.proxyMode == ProxyLocal {
		return fmt.Sprintf("%016X%016X", uint64(b.now().UnixNano()), b.batchSeq.Add(1))
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.MessageId
	}
	return strings.Join(ids, ",")
}

// batchProperties makes the messages of a request of several what a
// RocketMQ 5 broker stores of the batch a proxy makes of it: the proxy
// sends them as one SEND_BATCH_MESSAGE whose header carries the first
// message's properties
// (proxy/src/main/java/org/apache/rocketmq/proxy/processor/ProducerProcessor.java,
// buildSendMessageRequestHeader), the broker keeps them as the batch's
// (broker/src/main/java/org/apache/rocketmq/broker/processor/SendMessageProcessor.java)
// and writes them after each message's own
// (store/src/main/java/org/apache/rocketmq/store/MessageExtEncoder.java,
// encode(MessageExtBatch)), where a reader takes the later value. So every
// message reads the first one's tag, keys and user properties, over its
// own. Each keeps its own message ID, as on a broker with apache/rocketmq
// PR #9417 (before it, every message read the first's ID too), and its
// own delivery time.
func batchProperties(msgs []*rocketryv1.Message) {
	first := msgs[0]
	if first == nil {
		return
	}
	for _, m := range msgs[1:] {
		if m == nil {
			continue
		}
		if first.Tag != "" {
			m.Tag = first.Tag
		}
		if len(first.Keys) > 0 {
			m.Keys = first.Keys
		}
		if len(first.Properties) > 0 {
			p := make(map[string]string, len(m.Properties)+len(first.Properties))
			maps.Copy(p, m.Properties)
			maps.Copy(p, first.Properties)
			m.Properties = p
		}
	}
}

// fromV2 converts a v2 message to the store's message. A nil message is
// left to the send core, which refuses it.
func fromV2(m *rocketmqv2.Message) *rocketryv1.Message {
	if m == nil {
		return nil
	}
	sp := m.GetSystemProperties()
	return &rocketryv1.Message{
		MessageId:     sp.GetMessageId(),
		Topic:         m.GetTopic().GetName(),
		Tag:           sp.GetTag(),
		Keys:          sp.GetKeys(),
		Properties:    m.GetUserProperties(),
		Body:          m.GetBody(),
		Transactional: sp.GetMessageType() == rocketmqv2.MessageType_TRANSACTION,
		MessageGroup:  sp.GetMessageGroup(),
		DeliveryTime:  sp.GetDeliveryTimestamp(),
	}
}

// v2Codes maps the rocketry.v1 code of a refusal to its v2 body code;
// BAD_REQUEST is refined by the refusal's problem.
var v2Codes = map[rocketryv1.Code]rocketmqv2.Code{
	rocketryv1.Code_CODE_BAD_REQUEST:       rocketmqv2.Code_BAD_REQUEST,
	rocketryv1.Code_CODE_TOPIC_NOT_FOUND:   rocketmqv2.Code_TOPIC_NOT_FOUND,
	rocketryv1.Code_CODE_MESSAGE_TOO_LARGE: rocketmqv2.Code_MESSAGE_BODY_TOO_LARGE,
	rocketryv1.Code_CODE_TOO_MANY_REQUESTS: rocketmqv2.Code_TOO_MANY_REQUESTS,
	rocketryv1.Code_CODE_INTERNAL_ERROR:    rocketmqv2.Code_INTERNAL_SERVER_ERROR,
}

var v2Problems = [...]rocketmqv2.Code{
	problemOther:    rocketmqv2.Code_BAD_REQUEST,
	problemTopic:    rocketmqv2.Code_ILLEGAL_TOPIC,
	problemID:       rocketmqv2.Code_ILLEGAL_MESSAGE_ID,
	problemTag:      rocketmqv2.Code_ILLEGAL_MESSAGE_TAG,
	problemKey:      rocketmqv2.Code_ILLEGAL_MESSAGE_KEY,
	problemProperty: rocketmqv2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY,
	problemType:     rocketmqv2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
}

// v2StatusOf is the status of a request refused whole, not UNAVAILABLE:
// the proxy's own refusals keep their code; the broker's (throttled, busy,
// an injected INTERNAL fault) are 42900 or 50001 as the proxy maps the
// broker's answer in cluster mode, and 50001 in local mode.
func (b *Broker) v2StatusOf(r *refusal) *rocketmqv2.Status {
	if r.v2 != rocketmqv2.Code_CODE_UNSPECIFIED {
		return v2Status(r.v2, r.msg)
	}
	code, ok := v2Codes[r.code]
	if !ok {
		code = rocketmqv2.Code_INTERNAL_SERVER_ERROR
	}
	msg := r.msg
	switch {
	case r.code == rocketryv1.Code_CODE_BAD_REQUEST:
		code = v2Problems[r.problem]
	case r.code == rocketryv1.Code_CODE_TOO_MANY_REQUESTS:
		if r.tag == "" { // the throttler's: tagged as the broker's busy answers are
			msg = "[" + throttleNames[r.reason] + "]broker busy, " + strings.TrimPrefix(msg, "broker: ")
		}
		if b.cfg.proxyMode == ProxyLocal {
			code = rocketmqv2.Code_INTERNAL_SERVER_ERROR
		}
	}
	return v2Status(code, msg)
}
