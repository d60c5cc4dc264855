package broker_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
)

// TestRocketMQSendValidation: the proxy's validation, each refusal the
// whole request's status, with no entry, and nothing stored.
func TestRocketMQSendValidation(t *testing.T) {
	clock := newFakeClock()
	b := brokertest.Start(t, broker.WithMaxBodyBytes(10), broker.WithMaxBatch(3), broker.WithQueues(2),
		broker.WithAutoCreateTopics(false), broker.WithTopics("t"), broker.WithClock(clock.Now))
	c := dialV2(t, b.Addr())
	with := func(f func(m *rocketmqv2.Message)) *rocketmqv2.Message {
		m := v2msg("t", "m")
		f(m)
		return m
	}
	str := func(s string) *string { return &s }
	props := func(n, size int) map[string]string {
		out := map[string]string{}
		for i := range n {
			out[fmt.Sprintf("p%03d", i)] = strings.Repeat("v", size)
		}
		return out
	}
	delay := func(d time.Duration) func(m *rocketmqv2.Message) {
		return func(m *rocketmqv2.Message) {
			m.SystemProperties.DeliveryTimestamp = timestamppb.New(clock.Now().Add(d))
		}
	}
	for _, tc := range []struct {
		name string
		ms   []*rocketmqv2.Message
		want rocketmqv2.Code
		text string
	}{
		{"empty message id", []*rocketmqv2.Message{v2msg("t", "")}, rocketmqv2.Code_ILLEGAL_MESSAGE_ID, "message id cannot be empty"},
		{"blank message id", []*rocketmqv2.Message{v2msg("t", "  ")}, rocketmqv2.Code_ILLEGAL_MESSAGE_ID, "message id cannot be empty"},
		{"no system properties", []*rocketmqv2.Message{with(func(m *rocketmqv2.Message) { m.SystemProperties = nil })},
			rocketmqv2.Code_ILLEGAL_MESSAGE_ID, ""},
		{"topic with space", []*rocketmqv2.Message{v2msg("a b", "a")}, rocketmqv2.Code_ILLEGAL_TOPIC, "contains illegal characters"},
		{"topic with a dot", []*rocketmqv2.Message{v2msg("a.b", "a")}, rocketmqv2.Code_ILLEGAL_TOPIC, "^[%|a-zA-Z0-9_-]+$"},
		{"empty topic", []*rocketmqv2.Message{v2msg("", "a")}, rocketmqv2.Code_ILLEGAL_TOPIC, "topic name cannot be empty"},
		{"topic of 128 characters", []*rocketmqv2.Message{v2msg(strings.Repeat("t", 128), "a")}, rocketmqv2.Code_ILLEGAL_TOPIC,
			"longer than topic max length 127"},
		{"system topic", []*rocketmqv2.Message{v2msg("rmq_sys_x", "a")}, rocketmqv2.Code_ILLEGAL_TOPIC, "cannot access system topic"},
		{"topics differ", []*rocketmqv2.Message{v2msg("t", "a"), v2msg("u", "b")}, rocketmqv2.Code_MESSAGE_CORRUPTED, "topic in message is not same"},
		{"empty body", []*rocketmqv2.Message{with(func(m *rocketmqv2.Message) { m.Body = nil })}, rocketmqv2.Code_MESSAGE_BODY_EMPTY,
			"message body cannot be empty"},
		{"body too large", []*rocketmqv2.Message{with(func(m *rocketmqv2.Message) { m.Body = make([]byte, 11) })},
			rocketmqv2.Code_MESSAGE_BODY_TOO_LARGE, "cannot exceed the max 10"},
		{"129 properties", []*rocketmqv2.Message{with(func(m *rocketmqv2.Message) { m.UserProperties = props(129, 1) })},
			rocketmqv2.Code_MESSAGE_PROPERTIES_TOO_LARGE, "too many user properties, max is 128"},
		{"over 16 KiB of properties", []*rocketmqv2.Message{with(func(m *rocketmqv2.Message) { m.UserProperties = props(4, 4096) })},
			rocketmqv2.Code_MESSAGE_PROPERTIES_TOO_LARGE, "max is 16384"},
		{"reserved property", []*rocketmqv2.Message{with(func(m *rocketmqv2.Message) { m.UserProperties = map[string]string{"UNIQ_KEY": "x"} })},
			rocketmqv2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, "property is used by system: UNIQ_KEY"},
		{"control character in a property", []*rocketmqv2.Message{with(func(m *rocketmqv2.Message) { m.UserProperties = map[string]string{"k": "a\x01"} })},
			rocketmqv2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, "the value of property cannot contain control character"},
		{"tag with |", []*rocketmqv2.Message{with(func(m *rocketmqv2.Message) { m.SystemProperties.Tag = str("a|b") })},
			rocketmqv2.Code_ILLEGAL_MESSAGE_TAG, "tag cannot contain '|'"},
		{"blank tag", []*rocketmqv2.Message{with(func(m *rocketmqv2.Message) { m.SystemProperties.Tag = str(" ") })},
			rocketmqv2.Code_ILLEGAL_MESSAGE_TAG, "whitespace"},
		{"blank key", []*rocketmqv2.Message{with(func(m *rocketmqv2.Message) { m.SystemProperties.Keys = []string{"k", " "} })},
			rocketmqv2.Code_ILLEGAL_MESSAGE_KEY, "key cannot be the char sequence of whitespace"},
		{"blank message group", []*rocketmqv2.Message{with(func(m *rocketmqv2.Message) { m.SystemProperties.MessageGroup = str("  ") })},
			rocketmqv2.Code_ILLEGAL_MESSAGE_GROUP, "whitespace"},
		{"message group of 64 bytes", []*rocketmqv2.Message{with(func(m *rocketmqv2.Message) { m.SystemProperties.MessageGroup = str(strings.Repeat("g", 64)) })},
			rocketmqv2.Code_ILLEGAL_MESSAGE_GROUP, "message group exceed the max size 64"},
		{"delivery over 24 h away", []*rocketmqv2.Message{with(delay(24*time.Hour + time.Second))},
			rocketmqv2.Code_ILLEGAL_DELIVERY_TIME, "max is 86400000"},
		{"transaction recovery over an hour", []*rocketmqv2.Message{with(func(m *rocketmqv2.Message) {
			m.SystemProperties.MessageType = rocketmqv2.MessageType_TRANSACTION
			m.SystemProperties.OrphanedTransactionRecoveryDuration = durationpb.New(2 * time.Hour)
		})}, rocketmqv2.Code_BAD_REQUEST, "max is 3600"},
		{"one invalid message of three", []*rocketmqv2.Message{v2msg("t", "a"), v2msg("t", ""), v2msg("t", "c")},
			rocketmqv2.Code_ILLEGAL_MESSAGE_ID, "message id cannot be empty"},
		{"unknown topic", []*rocketmqv2.Message{v2msg("unknown", "a")}, rocketmqv2.Code_TOPIC_NOT_FOUND, "not found"},
		{"over WithMaxBatch", []*rocketmqv2.Message{v2msg("t", "1"), v2msg("t", "2"), v2msg("t", "3"), v2msg("t", "4")},
			rocketmqv2.Code_BAD_REQUEST, "the most is 3"},
		{"no messages", nil, rocketmqv2.Code_MESSAGE_CORRUPTED, "no message to send"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := v2send(t, c, tc.ms...)
			assert.Equal(t, []rocketmqv2.Code{tc.want}, v2codes(resp))
			assert.Contains(t, resp.Status.Message, tc.text)
			assert.NotEmpty(t, resp.Status.Message)
		})
	}
	assert.Empty(t, b.Messages("t"))
	assert.Equal(t, int64(26), b.Stats().BadRequests)

	// Within the limits.
	ok := []*rocketmqv2.Message{
		with(func(m *rocketmqv2.Message) { m.SystemProperties.MessageGroup = str(strings.Repeat("g", 63)) }),
		with(delay(24 * time.Hour)),
		with(func(m *rocketmqv2.Message) { m.UserProperties = props(128, 100) }),
		with(func(m *rocketmqv2.Message) { m.SystemProperties.Tag = str("a-tag") }),
	}
	for i, m := range ok {
		resp := v2send(t, c, m)
		require.Equal(t, []rocketmqv2.Code{v2OK, v2OK}, v2codes(resp), "message %d: %v", i, resp.Status)
	}
}
