package broker

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// TopicType is the one message type a declared topic accepts
// (WithTopicType). A topic the broker creates on first use, or by
// WithTopics, is TopicMixed: it accepts every type.
type TopicType uint8

// The topic types, as RocketMQ names them.
const (
	// TopicMixed accepts every message type; it is the type of a topic
	// nobody declared.
	TopicMixed TopicType = iota
	// TopicNormal accepts messages without a message group, a delivery
	// time or a transaction.
	TopicNormal
	// TopicFIFO accepts messages with a message group (and no delivery
	// time or transaction).
	TopicFIFO
	// TopicDelay accepts messages with a delivery time.
	TopicDelay
	// TopicTransaction accepts transactional messages.
	TopicTransaction
)

var topicTypeNames = [...]string{
	TopicMixed:       "MIXED",
	TopicNormal:      "NORMAL",
	TopicFIFO:        "FIFO",
	TopicDelay:       "DELAY",
	TopicTransaction: "TRANSACTION",
}

// String is the type's RocketMQ name: MIXED, NORMAL, FIFO, DELAY or
// TRANSACTION.
func (t TopicType) String() string {
	if int(t) < len(topicTypeNames) {
		return topicTypeNames[t]
	}
	return fmt.Sprintf("TopicType(%d)", uint8(t))
}

// ParseTopicType returns the type named s (MIXED, NORMAL, FIFO, DELAY or
// TRANSACTION, in any case), or an error naming s.
func ParseTopicType(s string) (TopicType, error) {
	for t, name := range topicTypeNames {
		if strings.EqualFold(s, name) {
			return TopicType(t), nil
		}
	}
	return 0, fmt.Errorf("broker: topic type %q is not one of %s", s, strings.Join(topicTypeNames[:], ", "))
}

// messageType is the v2 type of a declared topic; MESSAGE_TYPE_UNSPECIFIED
// for TopicMixed.
func (t TopicType) messageType() rocketmqv2.MessageType {
	switch t {
	case TopicNormal:
		return rocketmqv2.MessageType_NORMAL
	case TopicFIFO:
		return rocketmqv2.MessageType_FIFO
	case TopicDelay:
		return rocketmqv2.MessageType_DELAY
	case TopicTransaction:
		return rocketmqv2.MessageType_TRANSACTION
	}
	return rocketmqv2.MessageType_MESSAGE_TYPE_UNSPECIFIED
}

// acceptedTypesOf is what the queues of topic name accept in a route: the
// declared type, or every type (acceptedTypes) for a mixed or unknown
// topic.
func (b *Broker) acceptedTypesOf(name string) []rocketmqv2.MessageType {
	typ := b.cfg.topicTypes[name]
	if t := b.lookupTopic(name); t != nil {
		typ = t.typ
	}
	if typ == TopicMixed {
		return acceptedTypes
	}
	return []rocketmqv2.MessageType{typ.messageType()}
}

// msgExtra is what the broker keeps of an apache.rocketmq.v2 message
// beside its rocketry.v1 form: its type, message group, delivery time and
// body encoding. A message without any (a NORMAL message with an
// identity body) has none.
type msgExtra struct {
	typ       rocketmqv2.MessageType
	group     string
	deliverAt time.Time // zero: deliver at once
	gzip      bool
}

// v2Extras reads the extras of each message of a v2 request; nil when no
// message has any. A nil message has none.
func v2Extras(in []*rocketmqv2.Message) []*msgExtra {
	var out []*msgExtra
	for i, m := range in {
		sp := m.GetSystemProperties()
		x := &msgExtra{
			typ:   messageTypeOf(sp),
			group: sp.GetMessageGroup(),
			gzip:  sp.GetBodyEncoding() == rocketmqv2.Encoding_GZIP,
		}
		if sp.GetDeliveryTimestamp() != nil {
			x.deliverAt = sp.GetDeliveryTimestamp().AsTime()
		}
		if x.typ == rocketmqv2.MessageType_NORMAL && !x.gzip {
			continue
		}
		if out == nil {
			out = make([]*msgExtra, len(in))
		}
		out[i] = x
	}
	return out
}

// v1Extras reads the message_group and delivery_time of each message of a
// rocketry.v1 request into req: the extras the RocketMQ 5 face keeps of a
// FIFO or timed message, and the queue of a message with a group (its
// hash, groupQueue, as the proxy's), so that both faces store them alike.
// Unlike the proxy, which hashes the group of a request of one message
// only, each message of a rocketry.v1 request goes to its own group's
// queue. A message whose group or delivery time the proxy would refuse
// (checkRocketMQMessage: 40006, 40012), or that sets two of message_group,
// delivery_time and transactional, is refused (400 BAD_REQUEST).
func (b *Broker) v1Extras(req *sendRequest, now time.Time) {
	for i, m := range req.msgs {
		g, dt := m.GetMessageGroup(), m.GetDeliveryTime()
		if g == "" && dt == nil {
			continue
		}
		if req.extras == nil {
			req.extras = make([]*msgExtra, len(req.msgs))
			req.invalid = make([]*refusal, len(req.msgs))
			req.queues = make([]int32, len(req.msgs))
			for j := range req.queues {
				req.queues[j] = -1
			}
		}
		if r := checkV1Type(i, m, now); r != nil {
			req.invalid[i] = r
			continue
		}
		x := &msgExtra{typ: rocketmqv2.MessageType_FIFO, group: g}
		if dt != nil {
			x.typ, x.deliverAt = rocketmqv2.MessageType_DELAY, dt.AsTime()
		} else {
			req.queues[i] = int32(groupQueue(g, b.cfg.queues))
		}
		req.extras[i] = x
	}
}

// checkV1Type returns why message i's type is invalid, or nil: see
// v1Extras.
func checkV1Type(i int, m *rocketryv1.Message, now time.Time) *refusal {
	g, dt := m.GetMessageGroup(), m.GetDeliveryTime()
	switch {
	case g != "" && dt != nil:
		return badMessage(problemOther, "message %d: message_group and delivery_time are both set; a message is FIFO or timed, not both", i)
	case m.GetTransactional():
		return badMessage(problemOther, "message %d: a transactional message has no message_group or delivery_time", i)
	case dt != nil && dt.CheckValid() != nil:
		return badMessage(problemOther, "message %d: delivery_time: %v", i, dt.CheckValid())
	case dt != nil && dt.AsTime().Sub(now) > MaxDelay:
		return badMessage(problemOther, "message %d: delivery_time is %v ahead; the most is %v", i, dt.AsTime().Sub(now).Round(time.Second), MaxDelay)
	case dt != nil:
		return nil
	case blank(g):
		return badMessage(problemOther, "message %d: message_group cannot be the char sequence of whitespace", i)
	case len(g) > MaxMessageGroupBytes:
		return badMessage(problemOther, "message %d: message_group is %d bytes; the most is %d", i, len(g), MaxMessageGroupBytes)
	case !utf8.ValidString(g) || hasControl(g):
		return badMessage(problemOther, "message %d: message_group %s is not valid UTF-8 or has a control character", i, quote(g))
	}
	return nil
}

// messageTypeOf is a v2 message's type as the proxy derives it from its
// properties, not from its message_type field: TRANSACTION when its type
// says so, else DELAY with a delivery time, else FIFO with a message
// group, else NORMAL. See common/src/main/java/org/apache/rocketmq/common/
// attribute/TopicMessageType.java (parseFromMessageProperty) and
// proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/producer/SendMessageActivity.java
// (buildMessageProperty), which turns the system properties into those
// properties.
func messageTypeOf(sp *rocketmqv2.SystemProperties) rocketmqv2.MessageType {
	switch {
	case sp.GetMessageType() == rocketmqv2.MessageType_TRANSACTION:
		return rocketmqv2.MessageType_TRANSACTION
	case sp.GetDeliveryTimestamp() != nil:
		return rocketmqv2.MessageType_DELAY
	case sp.GetMessageGroup() != "":
		return rocketmqv2.MessageType_FIFO
	}
	return rocketmqv2.MessageType_NORMAL
}

// typeOf is the type of a stored message: its extra's, else TRANSACTION
// or NORMAL.
func typeOf(m *rocketryv1.Message, x *msgExtra) rocketmqv2.MessageType {
	switch {
	case x != nil:
		return x.typ
	case m.GetTransactional():
		return rocketmqv2.MessageType_TRANSACTION
	}
	return rocketmqv2.MessageType_NORMAL
}

// checkTopicType refuses a request whose first valid message is not of
// t's declared type with 40014 MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
// (rocketry.v1: 400 BAD_REQUEST); a mixed topic takes every type. As the
// proxy does, only the request's first message is checked and the refusal
// is the request's. See
// proxy/src/main/java/org/apache/rocketmq/proxy/processor/ProducerProcessor.java
// and proxy/src/main/java/org/apache/rocketmq/proxy/processor/validator/DefaultTopicMessageTypeValidator.java.
func (b *Broker) checkTopicType(t *topic, req sendRequest, res []entryResult) *refusal {
	if t.typ == TopicMixed {
		return nil
	}
	for i, m := range req.msgs {
		if res[i].refused != nil {
			continue
		}
		var x *msgExtra
		if req.extras != nil {
			x = req.extras[i]
		}
		if got := typeOf(m, x); got != t.typ.messageType() {
			return badMessage(problemType, "message %d: topic %q accepts %s messages; this message is %s", i, t.name, t.typ, got)
		}
		return nil
	}
	return nil
}

// timedMessage is a message stored with a delivery time still to come: it
// joins its queue at that time.
type timedMessage struct {
	at    time.Time
	seq   uint64 // arrival order, among messages due at the same time
	queue int
	msg   *rocketryv1.Message
	extra *msgExtra
}

// timedHeap holds a topic's timed messages, the first due first
// (container/heap).
type timedHeap []timedMessage

func (h timedHeap) Len() int { return len(h) }
func (h timedHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h timedHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timedHeap) Push(x any)   { *h = append(*h, x.(timedMessage)) }
func (h *timedHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = timedMessage{}
	*h = old[:len(old)-1]
	return x
}

// timestamp is t as a protobuf Timestamp, nil for the zero time.
func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
