package broker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rocketry-go/rocketry/broker"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
)

// TestRocketMQReceiveTagFilter: a group receives the messages its TAG
// expression matches; the others count as consumed, so they are no
// backlog of the group.
func TestRocketMQReceiveTagFilter(t *testing.T) {
	b, _ := start(t, consumerOpts(broker.WithQueues(1))...)
	c := dialV2(t, b.Addr())
	for _, tag := range []string{"a", "b", "c"} {
		m := v2msg("t", "m-"+tag)
		m.SystemProperties.Tag = &tag
		require.Equal(t, rocketmqv2.Code_OK, v2put(t, c, m))
	}
	stream, err := c.ReceiveMessage(ctx(t), &rocketmqv2.ReceiveMessageRequest{
		Group:             &rocketmqv2.Resource{Name: "g"},
		MessageQueue:      &rocketmqv2.MessageQueue{Topic: &rocketmqv2.Resource{Name: "t"}},
		FilterExpression:  &rocketmqv2.FilterExpression{Type: rocketmqv2.FilterType_TAG, Expression: "a || c"},
		BatchSize:         10,
		InvisibleDuration: durationpb.New(time.Minute),
	})
	require.NoError(t, err)
	var ids, handles []string
	for {
		resp, err := stream.Recv()
		if err != nil {
			break
		}
		if m := resp.GetMessage(); m != nil {
			ids = append(ids, m.GetSystemProperties().GetMessageId())
			assert.Equal(t, m.GetSystemProperties().GetMessageId(), "m-"+m.GetSystemProperties().GetTag(), "tag of the delivered message")
			handles = append(handles, handleOf(m))
		}
	}
	assert.Equal(t, []string{"m-a", "m-c"}, ids, "messages the filter matches")
	assert.Equal(t, int64(3), groupBacklog(b, "t", "g"), "backlog before the acks: m-b waits behind m-a")
	require.Equal(t, []rocketmqv2.Code{rocketmqv2.Code_OK, rocketmqv2.Code_OK}, ack(t, c, "t", "g", handles...))
	assert.Equal(t, int64(0), groupBacklog(b, "t", "g"), "backlog after the acks: m-b is not the group's")
}
