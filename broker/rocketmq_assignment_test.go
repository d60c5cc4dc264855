package broker_test

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
)

// accessPoint is addr as the Endpoints a client puts in its requests.
func accessPoint(t testing.TB, addr string) *rocketmqv2.Endpoints {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	return &rocketmqv2.Endpoints{Scheme: rocketmqv2.AddressScheme_IPv4, Addresses: []*rocketmqv2.Address{{Host: host, Port: int32(p)}}}
}

func assignment(t testing.TB, c rocketmqv2.MessagingServiceClient, topic, group string, ep *rocketmqv2.Endpoints) *rocketmqv2.QueryAssignmentResponse {
	t.Helper()
	req := &rocketmqv2.QueryAssignmentRequest{Topic: &rocketmqv2.Resource{Name: topic}, Endpoints: ep}
	if group != "" {
		req.Group = &rocketmqv2.Resource{Name: group}
	}
	resp, err := c.QueryAssignment(ctx(t), req)
	require.NoError(t, err, "QueryAssignment is served: the gRPC call is OK")
	return resp
}

// TestRocketMQQueryAssignment: one assignment per broker of the route,
// queue id -1, READ_WRITE, the broker (id 0) at the endpoints QueryRoute
// gives it, no accept types, as the proxy's RouteActivity.queryAssignment;
// and a receive of the assigned queue gets the topic's messages.
func TestRocketMQQueryAssignment(t *testing.T) {
	b := brokertest.Start(t, consumerOpts(broker.WithQueues(3), broker.WithBrokerName("east"))...)
	c := dialV2(t, b.Addr())
	ep := accessPoint(t, b.Addr())
	resp, err := c.QueryAssignment(ctx(t), &rocketmqv2.QueryAssignmentRequest{
		Topic:     &rocketmqv2.Resource{ResourceNamespace: "ns", Name: "orders"},
		Group:     &rocketmqv2.Resource{Name: "g"},
		Endpoints: ep,
	})
	require.NoError(t, err)
	require.Equal(t, rocketmqv2.Code_OK, resp.Status.GetCode())
	assert.Equal(t, "OK", resp.Status.GetMessage())
	require.Len(t, resp.Assignments, 1, "one per broker, not one per queue")
	q := resp.Assignments[0].GetMessageQueue()
	assert.Equal(t, int32(-1), q.GetId())
	assert.Equal(t, rocketmqv2.Permission_READ_WRITE, q.GetPermission())
	assert.True(t, proto.Equal(&rocketmqv2.Resource{ResourceNamespace: "ns", Name: "orders"}, q.GetTopic()), "topic %v", q.GetTopic())
	assert.Empty(t, q.GetAcceptMessageTypes())
	assert.Equal(t, "east", q.GetBroker().GetName())
	assert.Equal(t, int32(0), q.GetBroker().GetId())

	rt, err := c.QueryRoute(ctx(t), &rocketmqv2.QueryRouteRequest{Topic: &rocketmqv2.Resource{Name: "orders"}, Endpoints: ep})
	require.NoError(t, err)
	assert.True(t, proto.Equal(rt.MessageQueues[0].GetBroker(), q.GetBroker()), "the route's broker %v, assigned %v", rt.MessageQueues[0].GetBroker(), q.GetBroker())

	// A push consumer receives from the assigned queue: every queue of the broker.
	for i := range 3 {
		require.Equal(t, rocketmqv2.Code_OK, v2put(t, c, v2msg("orders", fmt.Sprintf("m%d", i))))
	}
	got := receiveV2(t, c, "orders", "g", 10, time.Minute)
	assert.ElementsMatch(t, []string{"m0", "m1", "m2"}, got.ids())
}

func TestRocketMQQueryAssignmentCluster(t *testing.T) {
	bs := brokertest.StartCluster(t, 3, broker.WithQueues(2))
	for i, b := range bs {
		resp := assignment(t, dialV2(t, b.Addr()), "t", "g", nil)
		require.Equal(t, rocketmqv2.Code_OK, resp.Status.GetCode())
		var got []string
		for _, a := range resp.Assignments {
			assert.Equal(t, int32(-1), a.GetMessageQueue().GetId())
			got = append(got, brokerOf(a.GetMessageQueue()))
		}
		want := []string{fmt.Sprintf("broker-%d@%s", i, b.Addr())}
		for j, o := range bs {
			if j != i {
				want = append(want, fmt.Sprintf("broker-%d@%s", j, o.Addr()))
			}
		}
		assert.Equal(t, want, got, "assignments from broker %d: itself first, as the route", i)
	}
}

func TestRocketMQQueryAssignmentRefusals(t *testing.T) {
	b := brokertest.Start(t, broker.WithAutoCreateTopics(false), broker.WithTopics("known"))
	c := dialV2(t, b.Addr())

	unknown := assignment(t, c, "unknown", "g", nil)
	assert.Equal(t, rocketmqv2.Code_TOPIC_NOT_FOUND, unknown.Status.GetCode())
	assert.Equal(t, route(t, c, "unknown").Status.GetMessage(), unknown.Status.GetMessage(), "the text of QueryRoute's")
	assert.Empty(t, unknown.Assignments)

	bad := assignment(t, c, "a b", "g", nil)
	assert.Equal(t, rocketmqv2.Code_ILLEGAL_TOPIC, bad.Status.GetCode())
	assert.Equal(t, route(t, c, "a b").Status.GetMessage(), bad.Status.GetMessage(), "the text of QueryRoute's")

	noGroup := assignment(t, c, "known", "", nil)
	assert.Equal(t, rocketmqv2.Code_ILLEGAL_CONSUMER_GROUP, noGroup.Status.GetCode())
	assert.Equal(t, "broker: empty group", noGroup.Status.GetMessage())
	assert.Empty(t, noGroup.Assignments)
	badGroup := assignment(t, c, "known", "g h", nil)
	assert.Equal(t, rocketmqv2.Code_ILLEGAL_CONSUMER_GROUP, badGroup.Status.GetCode())

	assert.Equal(t, rocketmqv2.Code_OK, assignment(t, c, "known", "g", nil).Status.GetCode())
	assert.Equal(t, int64(4), b.Stats().BadRequests, "the refusals are bad requests")
}

func TestRocketMQQueryAssignmentACL(t *testing.T) {
	b := brokertest.Start(t, broker.WithACL(map[string]string{"app": "secret"}))
	c := dialV2(t, b.Addr())
	req := &rocketmqv2.QueryAssignmentRequest{Topic: &rocketmqv2.Resource{Name: "t"}, Group: &rocketmqv2.Resource{Name: "g"}}

	resp, err := c.QueryAssignment(signed(t.Context(), "app", "guess", ""), req)
	require.NoError(t, err, "the gRPC call is OK; the refusal is its body status")
	assert.Equal(t, rocketmqv2.Code_UNAUTHORIZED, resp.GetStatus().GetCode())
	assert.Equal(t, "check signature failed.", resp.GetStatus().GetMessage())
	assert.Empty(t, resp.GetAssignments())
	assert.Equal(t, int64(1), b.AuthRefused("QueryAssignment"))

	resp, err = c.QueryAssignment(signed(t.Context(), "app", "secret", ""), req)
	require.NoError(t, err)
	assert.Equal(t, rocketmqv2.Code_OK, resp.GetStatus().GetCode())
	assert.Len(t, resp.GetAssignments(), 1)
}
