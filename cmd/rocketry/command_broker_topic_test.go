package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
)

// TestBrokerTopicType: --topic NAME=TYPE declares a topic whose route
// accepts only that type and which refuses a message of another type with
// 40014.
func TestBrokerTopicType(t *testing.T) {
	leakCheck(t)
	addr := deadAddress(t)
	_, stop := startBrokerCommand(t, "--listen", addr, "--topic", "orders=FIFO", "--topic", "later=delay", "--stats-interval", "0")
	defer stop()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	c := rocketmqv2.NewMessagingServiceClient(conn)
	for topic, want := range map[string]rocketmqv2.MessageType{"orders": rocketmqv2.MessageType_FIFO, "later": rocketmqv2.MessageType_DELAY} {
		resp, err := c.QueryRoute(context.Background(), &rocketmqv2.QueryRouteRequest{Topic: &rocketmqv2.Resource{Name: topic}})
		require.NoError(t, err)
		require.NotEmpty(t, resp.GetMessageQueues(), "queues of %s", topic)
		assert.Equal(t, []rocketmqv2.MessageType{want}, resp.GetMessageQueues()[0].GetAcceptMessageTypes(), "types %s accepts", topic)
	}
	resp, err := c.SendMessage(context.Background(), &rocketmqv2.SendMessageRequest{Messages: []*rocketmqv2.Message{{
		Topic: &rocketmqv2.Resource{Name: "orders"}, Body: []byte("x"),
		SystemProperties: &rocketmqv2.SystemProperties{MessageId: "m1", MessageType: rocketmqv2.MessageType_NORMAL},
	}}})
	require.NoError(t, err)
	assert.Equal(t, rocketmqv2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, resp.GetStatus().GetCode(), "a NORMAL message to a FIFO topic")
}

func TestBrokerTopicTypeBadFlags(t *testing.T) {
	dead := deadAddress(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--topic", "orders"}, `"orders" is not NAME=TYPE`},
		{[]string{"--topic", "=FIFO"}, `"=FIFO" is not NAME=TYPE`},
		{[]string{"--topic", "orders=LIFO"}, `topic type "LIFO" is not one of`},
		{[]string{"--topic", "a b=FIFO"}, "WithTopicType"},
	} {
		checkRefused(t, append([]string{"broker", "--listen", dead}, tc.args...), 2, tc.want)
	}
}
