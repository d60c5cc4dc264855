package broker

import (
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"

	"google.golang.org/protobuf/proto"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// The RocketMQ 5 proxy's limits on a sent message, its defaults in
// proxy/src/main/java/org/apache/rocketmq/proxy/config/ProxyConfig.java
// (maxUserPropertySize, userPropertyMaxNum, maxMessageGroupSize,
// maxDelayTimeMills, maxTransactionRecoverySecond) and
// client/src/main/java/org/apache/rocketmq/client/Validators.java
// (TOPIC_MAX_LENGTH).
const (
	MaxUserProperties       = 128
	MaxUserPropertyBytes    = 16 << 10
	MaxMessageGroupBytes    = 63 // a group of 64 bytes or more is refused
	MaxDelay                = 24 * time.Hour
	MaxTransactionRecovery  = time.Hour
	MaxRocketMQTopicLength  = 127
	rocketmqTopicCharacters = "^[%|a-zA-Z0-9_-]+$"
)

var rocketmqTopicRE = regexp.MustCompile(rocketmqTopicCharacters)

// reservedProperties are the property keys a message's user_properties may
// not use: MessageConst.STRING_HASH_SET of
// common/src/main/java/org/apache/rocketmq/common/message/MessageConst.java.
var reservedProperties = map[string]bool{}

func init() {
	for _, k := range strings.Fields(`TRACE_ON MSG_REGION KEYS TAGS WAIT DELAY RETRY_TOPIC REAL_TOPIC REAL_QID
		TRAN_MSG PGROUP MIN_OFFSET MAX_OFFSET BUYER_ID ORIGIN_MESSAGE_ID TRANSFER_FLAG CORRECTION_FLAG MQ2_FLAG
		RECONSUME_TIME UNIQ_KEY MAX_RECONSUME_TIMES CONSUME_START_TIME POP_CK POP_CK_OFFSET 1ST_POP_TIME
		TRAN_PREPARED_QUEUE_OFFSET DUP_INFO EXTEND_UNIQ_INFO INSTANCE_ID CORRELATION_ID REPLY_TO_CLIENT TTL
		ARRIVE_TIME PUSH_REPLY_TIME CLUSTER MSG_TYPE INNER_MULTI_QUEUE_OFFSET TIMER_DELAY_MS TIMER_DELAY_SEC
		TIMER_DELIVER_MS TIMER_ENQUEUE_MS TIMER_DEQUEUE_MS TIMER_ROLL_TIMES TIMER_OUT_MS TIMER_DEL_UNIQKEY
		TIMER_DELAY_LEVEL __BORNHOST BORN_TIMESTAMP DLQ_ORIGIN_TOPIC DLQ_ORIGIN_MESSAGE_ID`) {
		reservedProperties[k] = true
	}
}

// systemTopics are topics the proxy refuses to send to (TopicValidator's
// system topics), besides any name starting with "rmq_sys_".
var systemTopics = map[string]bool{
	"TBW102": true, "SCHEDULE_TOPIC_XXXX": true, "BenchmarkTest": true, "RMQ_SYS_TRANS_HALF_TOPIC": true,
	"RMQ_SYS_TRACE_TOPIC": true, "RMQ_SYS_TRANS_OP_HALF_TOPIC": true, "TRANS_CHECK_MAX_TIME_TOPIC": true,
	"SELF_TEST_TOPIC": true, "OFFSET_MOVED_EVENT": true,
}

// proxyRefusal is a refusal of the proxy's validation: its v2 code and
// text, and the rocketry.v1 code the broker counts it under.
func proxyRefusal(code rocketmqv2.Code, msg string) *refusal {
	v1 := rocketryv1.Code_CODE_BAD_REQUEST
	if code == rocketmqv2.Code_MESSAGE_BODY_TOO_LARGE || code == rocketmqv2.Code_MESSAGE_PROPERTIES_TOO_LARGE {
		v1 = rocketryv1.Code_CODE_MESSAGE_TOO_LARGE
	}
	return &refusal{code: v1, v2: code, msg: msg}
}

// checkRocketMQTopic validates the request's topic as the proxy does
// (GrpcValidator.validateTopic in
// proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/common/GrpcValidator.java):
// 40002 ILLEGAL_TOPIC when it is blank, a system topic, longer than 127
// characters, or has characters other than ^[%|a-zA-Z0-9_-]+$.
func checkRocketMQTopic(name string) *refusal {
	bad := func(msg string) *refusal { return proxyRefusal(rocketmqv2.Code_ILLEGAL_TOPIC, msg) }
	switch {
	case blank(name):
		return bad("topic name cannot be empty")
	case systemTopics[name] || strings.HasPrefix(name, "rmq_sys_"):
		return bad("cannot access system topic")
	case len(utf16.Encode([]rune(name))) > MaxRocketMQTopicLength:
		return bad(fmt.Sprintf("The specified topic is longer than topic max length %d.", MaxRocketMQTopicLength))
	case !rocketmqTopicRE.MatchString(name):
		return bad(fmt.Sprintf("The specified topic[%s] contains illegal characters, allowing only %s", name, rocketmqTopicCharacters))
	}
	return nil
}

// checkRocketMQMessage validates one message of a request whose first
// message's topic is topic, in the order and with the codes and texts of
// proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/producer/SendMessageActivity.java
// (buildMessage, validateMessageBodySize, buildMessageProperty,
// validateMessageKey, validateTransactionRecoverySecond, validateDelayTime,
// validateMessageGroup): the topic the same, the body neither empty
// (41302) nor too large (41301), at most 128 user properties (43101), none
// with a reserved key or a control character (40007), a valid tag
// (40004) and keys (40005), at most 16 KiB of properties, tag and keys
// (43101), a message id (40009), a transaction recovery of at most an hour
// (40000), a delivery at most 24 hours away (40012), a valid message group
// (40006).
func (b *Broker) checkRocketMQMessage(m *rocketmqv2.Message, topic *rocketmqv2.Resource, now time.Time) *refusal {
	if !proto.Equal(m.GetTopic(), topic) {
		return proxyRefusal(rocketmqv2.Code_MESSAGE_CORRUPTED, "topic in message is not same")
	}
	body := m.GetBody()
	if len(body) == 0 {
		return proxyRefusal(rocketmqv2.Code_MESSAGE_BODY_EMPTY, "message body cannot be empty")
	}
	if len(body) > b.cfg.maxBody {
		return proxyRefusal(rocketmqv2.Code_MESSAGE_BODY_TOO_LARGE, fmt.Sprintf("message body cannot exceed the max %d", b.cfg.maxBody))
	}
	props := m.GetUserProperties()
	if len(props) > MaxUserProperties {
		return proxyRefusal(rocketmqv2.Code_MESSAGE_PROPERTIES_TOO_LARGE, fmt.Sprintf("too many user properties, max is %d", MaxUserProperties))
	}
	size := 0
	for k, v := range props {
		switch {
		case reservedProperties[k]:
			return proxyRefusal(rocketmqv2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, "property is used by system: "+k)
		case hasControl(k):
			return proxyRefusal(rocketmqv2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, "the key of property cannot contain control character")
		case hasControl(v):
			return proxyRefusal(rocketmqv2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, "the value of property cannot contain control character")
		}
		size += len(k) + len(v)
	}
	sp := m.GetSystemProperties()
	tag := sp.GetTag()
	if tag != "" {
		switch {
		case blank(tag):
			return proxyRefusal(rocketmqv2.Code_ILLEGAL_MESSAGE_TAG, "tag cannot be the char sequence of whitespace")
		case strings.Contains(tag, "|"):
			return proxyRefusal(rocketmqv2.Code_ILLEGAL_MESSAGE_TAG, "tag cannot contain '|'")
		case hasControl(tag):
			return proxyRefusal(rocketmqv2.Code_ILLEGAL_MESSAGE_TAG, "tag cannot contain control character")
		}
	}
	size += len(tag)
	for _, k := range sp.GetKeys() {
		switch {
		case k != "" && blank(k):
			return proxyRefusal(rocketmqv2.Code_ILLEGAL_MESSAGE_KEY, "key cannot be the char sequence of whitespace")
		case hasControl(k):
			return proxyRefusal(rocketmqv2.Code_ILLEGAL_MESSAGE_KEY, "key cannot contain control character")
		}
		size += len(k)
	}
	if size > MaxUserPropertyBytes {
		return proxyRefusal(rocketmqv2.Code_MESSAGE_PROPERTIES_TOO_LARGE,
			fmt.Sprintf("the total size of user property is too large, max is %d", MaxUserPropertyBytes))
	}
	if blank(sp.GetMessageId()) {
		return proxyRefusal(rocketmqv2.Code_ILLEGAL_MESSAGE_ID, "message id cannot be empty")
	}
	if sp.GetMessageType() == rocketmqv2.MessageType_TRANSACTION && sp.GetOrphanedTransactionRecoveryDuration() != nil {
		if s := sp.GetOrphanedTransactionRecoveryDuration().GetSeconds(); s > int64(MaxTransactionRecovery/time.Second) {
			return proxyRefusal(rocketmqv2.Code_BAD_REQUEST, fmt.Sprintf(
				"the max transaction recovery time of message is too large, max is %d", int64(MaxTransactionRecovery/time.Second)))
		}
	}
	if ts := sp.GetDeliveryTimestamp(); ts != nil {
		if ts.AsTime().Sub(now) > MaxDelay {
			return proxyRefusal(rocketmqv2.Code_ILLEGAL_DELIVERY_TIME, fmt.Sprintf(
				"the max delay time of message is too large, max is %d", MaxDelay.Milliseconds()))
		}
	}
	if g := sp.GetMessageGroup(); g != "" {
		switch {
		case blank(g):
			return proxyRefusal(rocketmqv2.Code_ILLEGAL_MESSAGE_GROUP, "message group cannot be the char sequence of whitespace")
		case len(g) > MaxMessageGroupBytes:
			return proxyRefusal(rocketmqv2.Code_ILLEGAL_MESSAGE_GROUP, fmt.Sprintf("message group exceed the max size %d", MaxMessageGroupBytes+1))
		case hasControl(g):
			return proxyRefusal(rocketmqv2.Code_ILLEGAL_MESSAGE_GROUP, "message group cannot contain control character")
		}
	}
	return nil
}

// blank is StringUtils.isBlank: empty or only whitespace.
func blank(s string) bool { return strings.TrimFunc(s, unicode.IsSpace) == "" }

// hasControl is GrpcValidator.containControlCharacter: a character of
// U+0000-U+001F or U+007F-U+009F.
func hasControl(s string) bool { return strings.IndexFunc(s, unicode.IsControl) >= 0 }
