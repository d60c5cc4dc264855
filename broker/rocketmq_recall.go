package broker

import (
	"container/heap"
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
)

// Recall of a timed message on the apache.rocketmq.v2 face, as RocketMQ 5
// does it: the SendResultEntry of a single message stored in the timer
// (a delivery time still to come) carries a recall_handle, and
// RecallMessage with it removes the message before it is due, so that no
// consumer ever sees it.

// recallHandle is the recall handle of a message stored with placement p:
// "" unless it waits in the timer. It is made as the broker makes it
// (common/src/main/java/org/apache/rocketmq/common/producer/RecallMessageHandle.java,
// HandleV1): "v1 TOPIC BROKER_NAME DELIVERY_MS MESSAGE_ID", URL-safe
// base64 without padding.
func (b *Broker) recallHandle(m *rocketmqv2.Message, p placement) string {
	at := m.GetSystemProperties().GetDeliveryTimestamp()
	if at == nil || p.offset >= 0 || p.duplicate {
		return ""
	}
	s := strings.Join([]string{"v1", m.GetTopic().GetName(), b.cfg.brokerName,
		strconv.FormatInt(at.AsTime().UnixMilli(), 10), m.GetSystemProperties().GetMessageId()}, " ")
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

// recallHandleV1 is a decoded recall handle.
type recallHandleV1 struct {
	topic, broker, id string
	deliverMs         int64
}

// decodeRecallHandle decodes a recall handle, with the broker's texts for
// a bad one.
func decodeRecallHandle(s string) (recallHandleV1, error) {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil || blank(s) {
		return recallHandleV1{}, fmt.Errorf("recall handle is invalid")
	}
	f := strings.Split(string(raw), " ")
	if len(f) != 5 || f[0] != "v1" {
		return recallHandleV1{}, fmt.Errorf("recall handle is invalid")
	}
	ms, err := strconv.ParseInt(f[3], 10, 64)
	if err != nil {
		ms = -1 // NumberUtils.toLong's default: refused as not in the future
	}
	return recallHandleV1{topic: f[1], broker: f[2], deliverMs: ms, id: f[4]}, nil
}

// RecallMessage removes the timed message named by the request's
// recall_handle before it is due, as the proxy and the broker answer it
// (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/producer/RecallMessageActivity.java,
// proxy/src/main/java/org/apache/rocketmq/proxy/processor/ProducerProcessor.java,
// broker/src/main/java/org/apache/rocketmq/broker/processor/RecallMessageProcessor.java):
//
//   - an invalid topic is 40002 ILLEGAL_TOPIC, an unknown one 40402
//     TOPIC_NOT_FOUND, a topic declared with a type other than DELAY
//     40014 MESSAGE_PROPERTY_CONFLICT_WITH_TYPE (the proxy's topic type
//     check);
//   - a handle that does not decode, or names another topic or broker, is
//     50001 INTERNAL_SERVER_ERROR (the proxy's decoding error; the broker's
//     ILLEGAL_OPERATION "recall failed, topic not match" or "recall
//     failed, broker service not available", which the proxy answers as
//     50001);
//   - a handle whose delivery time has come (the message was delivered, or
//     is about to be) is 50001 "recall failed, timestamp invalid";
//   - otherwise the answer is OK with the handle's message id, and the
//     message, if it still waits in the timer, is removed and never
//     delivered. A well-formed handle of a message the broker does not
//     hold (recalled already) is OK too: the real broker writes its recall
//     marker all the same.
//
// Stats still counts a recalled message as stored when sent.
func (s rocketmqServer) RecallMessage(ctx context.Context, req *rocketmqv2.RecallMessageRequest) (*rocketmqv2.RecallMessageResponse, error) {
	b := s.b
	refuse := func(code rocketmqv2.Code, msg string) (*rocketmqv2.RecallMessageResponse, error) {
		return &rocketmqv2.RecallMessageResponse{Status: v2Status(code, msg)}, nil
	}
	name := req.GetTopic().GetName()
	if r := checkRocketMQTopic(name); r != nil {
		return refuse(rocketmqv2.Code_ILLEGAL_TOPIC, r.msg)
	}
	t := b.lookupTopic(name)
	if t == nil {
		return refuse(rocketmqv2.Code_TOPIC_NOT_FOUND, fmt.Sprintf("recall failed, the topic[%s] not exist", name))
	}
	if t.typ != TopicMixed && t.typ != TopicDelay {
		return refuse(rocketmqv2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
			fmt.Sprintf("topic %q accepts %s messages; only a DELAY message can be recalled", name, t.typ))
	}
	h, err := decodeRecallHandle(req.GetRecallHandle())
	switch {
	case err != nil:
		return refuse(rocketmqv2.Code_INTERNAL_SERVER_ERROR, err.Error())
	case h.topic != name:
		return refuse(rocketmqv2.Code_INTERNAL_SERVER_ERROR, "recall failed, topic not match")
	case h.broker != b.cfg.brokerName:
		return refuse(rocketmqv2.Code_INTERNAL_SERVER_ERROR, "recall failed, broker service not available")
	}
	now := b.now()
	if left := h.deliverMs - now.UnixMilli(); left <= 0 || left >= MaxDelay.Milliseconds() {
		return refuse(rocketmqv2.Code_INTERNAL_SERVER_ERROR, "recall failed, timestamp invalid")
	}
	t.mu.Lock()
	t.promoteLocked(now)
	for i, e := range t.timed {
		if e.msg.MessageId == h.id && e.at.UnixMilli() == h.deliverMs {
			heap.Remove(&t.timed, i)
			break
		}
	}
	t.mu.Unlock()
	return &rocketmqv2.RecallMessageResponse{Status: v2OK(), MessageId: h.id}, nil
}
