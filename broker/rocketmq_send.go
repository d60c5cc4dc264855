package broker

import (
	"context"
	"fmt"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/apache/rocketmq/v2"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// SendMessage is the apache.rocketmq.v2 face of the send core (the one
// rocketry.v1 SendMessage uses: validate, faults, throttle, store). Each
// message is answered by an entry with its own body status, in order:
//
//   - 20000 OK with message_id and offset (the status message names the
//     queue), also for a duplicate, which answers the original's offset;
//   - 40000 BAD_REQUEST, 40002 ILLEGAL_TOPIC, 40007
//     ILLEGAL_MESSAGE_PROPERTY_KEY, 40009 ILLEGAL_MESSAGE_ID, 41301
//     MESSAGE_BODY_TOO_LARGE or 40402 TOPIC_NOT_FOUND for an invalid
//     message, refused alone: the other messages go on (a tag or key that
//     is not UTF-8 would be 40004 or 40005, but gRPC refuses such a request
//     before it arrives);
//   - 42900 TOO_MANY_REQUESTS when throttled, the status message starting
//     with the reason (BACKLOG, STORAGE_LOAD, SEND_RATE) and ending with
//     the broker's retry hint;
//   - 50001 INTERNAL_SERVER_ERROR for an injected INTERNAL fault.
//
// A throttled or faulted request stores none of its messages. The top
// status is OK when every entry is OK, the entries' code when they all
// share one, and 30000 MULTIPLE_RESULTS when they differ. The rest of the
// injected faults answer as on rocketry.v1, with a gRPC error and no body:
// UNAVAILABLE (including a dropped connection), or the caller's deadline
// for a blackhole. A request without messages or with more than
// WithMaxBatch is 40000 as a whole.
//
// Messages are stored as rocketry.v1 messages, readable by ConsumerService
// and Broker.Messages: system_properties.message_id, tag and keys become
// the message's id, tag and keys, user_properties its properties, body its
// body as sent (a GZIP body stays compressed), and message_type
// TRANSACTION sets transactional. The message goes to the queue of
// system_properties.queue_id (a queue of the route); the other system
// properties and the topic's resource_namespace are not kept.
func (s rocketmqServer) SendMessage(ctx context.Context, req *rocketmqv2.SendMessageRequest) (*rocketmqv2.SendMessageResponse, error) {
	b := s.b
	in := req.GetMessages()
	sr := sendRequest{
		protocol: ProtocolRocketMQV2,
		msgs:     make([]*rocketryv1.Message, len(in)),
		invalid:  make([]*refusal, len(in)),
		queues:   make([]int32, len(in)),
	}
	for i, m := range in {
		sr.msgs[i], sr.queues[i], sr.invalid[i] = b.fromV2(i, m)
	}
	sr.extras = v2Extras(in)
	whole, res := b.send(ctx, sr)
	if whole != nil {
		st := v2StatusOf(whole)
		resp := &rocketmqv2.SendMessageResponse{Status: st}
		for _, m := range sr.msgs {
			resp.Entries = append(resp.Entries, &rocketmqv2.SendResultEntry{Status: st, MessageId: m.GetMessageId()})
		}
		return resp, nil
	}
	resp := &rocketmqv2.SendMessageResponse{Entries: make([]*rocketmqv2.SendResultEntry, len(res))}
	for i, r := range res {
		if r.refused != nil && r.refused.code == rocketryv1.Code_CODE_UNAVAILABLE {
			return nil, r.refused.status() // the call failed: no body
		}
		e := &rocketmqv2.SendResultEntry{MessageId: sr.msgs[i].GetMessageId()}
		switch {
		case r.refused != nil:
			e.Status = v2StatusOf(r.refused)
		case r.duplicate:
			e.Status = v2Status(rocketmqv2.Code_OK, fmt.Sprintf("duplicate of the message stored in queue %d at offset %d", r.queue, r.offset))
			e.Offset = r.offset
		default:
			e.Status = v2Status(rocketmqv2.Code_OK, fmt.Sprintf("stored in queue %d at offset %d", r.queue, r.offset))
			e.Offset = r.offset
		}
		if e.Status.Code == rocketmqv2.Code_OK && sr.msgs[i].Transactional {
			e.TransactionId = e.MessageId // EndTransaction accepts any id
		}
		resp.Entries[i] = e
	}
	resp.Status = topStatus(resp.Entries)
	return resp, nil
}

// fromV2 converts message i of a v2 request to the store's message and the
// queue it asks for, or answers why it cannot be stored. A nil message is
// left to the send core, which refuses it.
func (b *Broker) fromV2(i int, m *rocketmqv2.Message) (*rocketryv1.Message, int32, *refusal) {
	if m == nil {
		return nil, -1, nil
	}
	sp := m.GetSystemProperties()
	out := &rocketryv1.Message{
		MessageId:     sp.GetMessageId(),
		Topic:         m.GetTopic().GetName(),
		Tag:           sp.GetTag(),
		Keys:          sp.GetKeys(),
		Properties:    m.GetUserProperties(),
		Body:          m.GetBody(),
		Transactional: sp.GetMessageType() == rocketmqv2.MessageType_TRANSACTION,
	}
	if sp == nil {
		return out, -1, badMessage(problemID, "message %d: missing system_properties (and its message_id)", i)
	}
	if q := sp.GetQueueId(); q < 0 || int(q) >= b.cfg.queues {
		return out, -1, badMessage(problemOther, "message %d: queue_id %d is not a queue of the route (0..%d)", i, q, b.cfg.queues-1)
	}
	return out, sp.GetQueueId(), nil
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

// v2StatusOf is the body status of a refusal that is not UNAVAILABLE.
func v2StatusOf(r *refusal) *rocketmqv2.Status {
	code, ok := v2Codes[r.code]
	if !ok {
		code = rocketmqv2.Code_INTERNAL_SERVER_ERROR
	}
	msg := r.msg
	switch {
	case r.code == rocketryv1.Code_CODE_BAD_REQUEST:
		code = v2Problems[r.problem]
	case r.code == rocketryv1.Code_CODE_TOO_MANY_REQUESTS:
		msg = throttleNames[r.reason] + ": " + msg
		if r.retry > 0 {
			msg += fmt.Sprintf("; retry in %v", r.retry)
		}
	}
	return v2Status(code, msg)
}

// topStatus is a response's status: OK when every entry is OK, the
// entries' code when they share one, MULTIPLE_RESULTS when they differ.
func topStatus(entries []*rocketmqv2.SendResultEntry) *rocketmqv2.Status {
	first := entries[0].Status
	for _, e := range entries[1:] {
		if e.Status.Code != first.Code {
			return v2Status(rocketmqv2.Code_MULTIPLE_RESULTS, "broker: the messages have different results; see each entry")
		}
	}
	if first.Code == rocketmqv2.Code_OK {
		return v2OK()
	}
	return v2Status(first.Code, first.Message)
}
