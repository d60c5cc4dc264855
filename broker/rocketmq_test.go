package broker_test

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
)

// dialV2 is an apache.rocketmq.v2 client of the broker at addr.
func dialV2(t testing.TB, addr string) rocketmqv2.MessagingServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return rocketmqv2.NewMessagingServiceClient(conn)
}

// v2msg is a v2 message of topic with id.
func v2msg(topic, id string) *rocketmqv2.Message {
	return &rocketmqv2.Message{
		Topic:            &rocketmqv2.Resource{Name: topic},
		Body:             []byte("body of " + id),
		SystemProperties: &rocketmqv2.SystemProperties{MessageId: id, MessageType: rocketmqv2.MessageType_NORMAL},
	}
}

func v2send(t testing.TB, c rocketmqv2.MessagingServiceClient, ms ...*rocketmqv2.Message) *rocketmqv2.SendMessageResponse {
	t.Helper()
	resp, err := c.SendMessage(ctx(t), &rocketmqv2.SendMessageRequest{Messages: ms})
	require.NoError(t, err, "v2 SendMessage(%d messages)", len(ms))
	if resp.Status.GetCode() == rocketmqv2.Code_OK {
		require.Len(t, resp.Entries, 1, "a stored request's entries: one, however many messages")
	} else {
		require.Empty(t, resp.Entries, "a refused request's entries")
	}
	return resp
}

// codes of a response: the top status's, then each entry's.
func v2codes(resp *rocketmqv2.SendMessageResponse) []rocketmqv2.Code {
	out := []rocketmqv2.Code{resp.Status.GetCode()}
	for _, e := range resp.Entries {
		out = append(out, e.Status.GetCode())
	}
	return out
}

func route(t testing.TB, c rocketmqv2.MessagingServiceClient, topic string) *rocketmqv2.QueryRouteResponse {
	t.Helper()
	resp, err := c.QueryRoute(ctx(t), &rocketmqv2.QueryRouteRequest{Topic: &rocketmqv2.Resource{Name: topic}})
	require.NoError(t, err)
	return resp
}

// brokerOf is where a route's queue is: broker name and host:port.
func brokerOf(q *rocketmqv2.MessageQueue) string {
	a := q.GetBroker().GetEndpoints().GetAddresses()[0]
	return q.GetBroker().GetName() + "@" + net.JoinHostPort(a.Host, strconv.Itoa(int(a.Port)))
}

func TestRocketMQQueryRoute(t *testing.T) {
	b := brokertest.Start(t, broker.WithQueues(3))
	resp := route(t, dialV2(t, b.Addr()), "orders")
	require.Equal(t, rocketmqv2.Code_OK, resp.Status.GetCode())
	require.Len(t, resp.MessageQueues, 3)
	for i, q := range resp.MessageQueues {
		assert.Equal(t, int32(i), q.Id)
		assert.Equal(t, "orders", q.Topic.GetName())
		assert.Equal(t, rocketmqv2.Permission_READ_WRITE, q.Permission)
		assert.Equal(t, "broker-0@"+b.Addr(), brokerOf(q))
		assert.Equal(t, rocketmqv2.AddressScheme_IPv4, q.Broker.Endpoints.Scheme)
		assert.ElementsMatch(t, []rocketmqv2.MessageType{rocketmqv2.MessageType_NORMAL, rocketmqv2.MessageType_FIFO,
			rocketmqv2.MessageType_DELAY, rocketmqv2.MessageType_TRANSACTION}, q.AcceptMessageTypes)
	}
	assert.Equal(t, rocketmqv2.Code_ILLEGAL_TOPIC, route(t, dialV2(t, b.Addr()), "a b").Status.GetCode())

	closed := brokertest.Start(t, broker.WithAutoCreateTopics(false), broker.WithTopics("known"), broker.WithBrokerName("east"))
	c := dialV2(t, closed.Addr())
	assert.Equal(t, rocketmqv2.Code_TOPIC_NOT_FOUND, route(t, c, "unknown").Status.GetCode())
	known := route(t, c, "known")
	require.Equal(t, rocketmqv2.Code_OK, known.Status.GetCode())
	assert.Equal(t, "east@"+closed.Addr(), brokerOf(known.MessageQueues[0]))
}

func TestRocketMQClusterRoute(t *testing.T) {
	bs := brokertest.StartCluster(t, 3, broker.WithQueues(2))
	require.Len(t, bs, 3)
	for i, b := range bs {
		resp := route(t, dialV2(t, b.Addr()), "t")
		require.Equal(t, rocketmqv2.Code_OK, resp.Status.GetCode())
		got := map[string][]int32{}
		for _, q := range resp.MessageQueues {
			got[brokerOf(q)] = append(got[brokerOf(q)], q.Id)
		}
		want := map[string][]int32{}
		for j, o := range bs {
			want[fmt.Sprintf("broker-%d@%s", j, o.Addr())] = []int32{0, 1}
		}
		assert.Equal(t, want, got, "route from broker %d", i)
		assert.Equal(t, fmt.Sprintf("broker-%d@%s", i, b.Addr()), brokerOf(resp.MessageQueues[0]), "a broker lists itself first")
	}
}

// TestRocketMQClusterRouteLocalMode: a client that dialled every broker's
// address (one access point list for the whole cluster) still reads each
// broker, this one included, at its own address: the brokers answer as
// proxies in local mode, never listing themselves at the client's access
// points, which would make one broker look like three.
func TestRocketMQClusterRouteLocalMode(t *testing.T) {
	bs := brokertest.StartCluster(t, 3, broker.WithQueues(1))
	all := &rocketmqv2.Endpoints{Scheme: rocketmqv2.AddressScheme_IPv4}
	for _, b := range bs {
		host, port, err := net.SplitHostPort(b.Addr())
		require.NoError(t, err)
		p, err := strconv.Atoi(port)
		require.NoError(t, err)
		all.Addresses = append(all.Addresses, &rocketmqv2.Address{Host: host, Port: int32(p)})
	}
	for i, b := range bs {
		resp, err := dialV2(t, b.Addr()).QueryRoute(ctx(t), &rocketmqv2.QueryRouteRequest{Topic: &rocketmqv2.Resource{Name: "t"}, Endpoints: all})
		require.NoError(t, err)
		require.Equal(t, rocketmqv2.Code_OK, resp.Status.GetCode())
		for _, q := range resp.MessageQueues {
			assert.Len(t, q.GetBroker().GetEndpoints().GetAddresses(), 1, "route from broker %d: %s is listed at %d addresses", i, q.GetBroker().GetName(), len(q.GetBroker().GetEndpoints().GetAddresses()))
		}
		assert.Equal(t, fmt.Sprintf("broker-%d@%s", i, b.Addr()), brokerOf(resp.MessageQueues[0]), "broker %d lists itself at its own address", i)
	}
}

func TestRocketMQTelemetrySettings(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       []broker.Option
		attempts   int32
		initial    time.Duration
		max        time.Duration
		multiplier float32
	}{
		{"proxy defaults", nil, 3, 10 * time.Millisecond, time.Second, 2},
		{"WithClientRetryPolicy", []broker.Option{broker.WithClientRetryPolicy(5, 100*time.Millisecond, 2*time.Second, 1.5)},
			5, 100 * time.Millisecond, 2 * time.Second, 1.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := brokertest.Start(t, append(tc.opts, broker.WithMaxBodyBytes(1000))...)
			stream, err := dialV2(t, b.Addr()).Telemetry(ctx(t))
			require.NoError(t, err)
			producer := rocketmqv2.ClientType_PRODUCER
			require.NoError(t, stream.Send(&rocketmqv2.TelemetryCommand{Command: &rocketmqv2.TelemetryCommand_Settings{Settings: &rocketmqv2.Settings{
				ClientType: &producer,
				PubSub:     &rocketmqv2.Settings_Publishing{Publishing: &rocketmqv2.Publishing{Topics: []*rocketmqv2.Resource{{Name: "t"}}}},
			}}}))
			got, err := stream.Recv()
			require.NoError(t, err)
			st := got.GetSettings()
			require.NotNil(t, st, "Telemetry answer %v has no settings", got)
			assert.Equal(t, rocketmqv2.Code_OK, got.GetStatus().GetCode())
			assert.Equal(t, rocketmqv2.ClientType_PRODUCER, st.GetClientType())
			bp := st.GetBackoffPolicy()
			eb := bp.GetExponentialBackoff()
			require.NotNil(t, eb, "backoff_policy %v is not exponential", bp)
			assert.Equal(t, tc.attempts, bp.MaxAttempts)
			assert.Equal(t, tc.initial, eb.Initial.AsDuration())
			assert.Equal(t, tc.max, eb.Max.AsDuration())
			assert.Equal(t, tc.multiplier, eb.Multiplier)
			assert.Equal(t, 3*time.Second, st.GetRequestTimeout().AsDuration())
			assert.Equal(t, int32(1000), st.GetPublishing().GetMaxBodySize())
			assert.Equal(t, "t", st.GetPublishing().GetTopics()[0].GetName())
			// The stream stays open until the client closes it.
			require.NoError(t, stream.CloseSend())
			_, err = stream.Recv()
			assert.Equal(t, io.EOF, err, "Recv after CloseSend")
		})
	}
}

// TestRocketMQStopEndsTelemetry pins that Stop and Restart end the
// Telemetry streams: Stop returns at once, not after the grace period (an
// hour here: the test ends only if Stop does not wait for it), and leaves
// no goroutine (TestMain's goleak).
func TestRocketMQStopEndsTelemetry(t *testing.T) {
	b, err := broker.New(broker.WithGracePeriod(time.Hour))
	require.NoError(t, err)
	require.NoError(t, b.Start("127.0.0.1:0"))
	c := dialV2(t, b.Addr())
	open := func() grpc.BidiStreamingClient[rocketmqv2.TelemetryCommand, rocketmqv2.TelemetryCommand] {
		stream, err := c.Telemetry(ctx(t))
		require.NoError(t, err)
		require.NoError(t, stream.Send(&rocketmqv2.TelemetryCommand{Command: &rocketmqv2.TelemetryCommand_Settings{Settings: &rocketmqv2.Settings{}}}))
		_, err = stream.Recv()
		require.NoError(t, err)
		return stream
	}
	stream := open()
	require.NoError(t, b.Restart())
	_, err = stream.Recv()
	assert.Equal(t, codes.Unavailable, status.Code(err), "Recv after Restart: %v", err)

	var streams []grpc.BidiStreamingClient[rocketmqv2.TelemetryCommand, rocketmqv2.TelemetryCommand]
	waitFor(t, func() bool {
		s, err := c.Telemetry(ctx(t), grpc.WaitForReady(true))
		if err == nil && s.Send(&rocketmqv2.TelemetryCommand{Command: &rocketmqv2.TelemetryCommand_Settings{Settings: &rocketmqv2.Settings{}}}) == nil {
			if _, err := s.Recv(); err == nil {
				streams = append(streams, s)
				return true
			}
		}
		return false
	})
	streams = append(streams, open())
	b.Stop() // with open Telemetry streams
	for i, s := range streams {
		_, err := s.Recv()
		assert.Equal(t, codes.Unavailable, status.Code(err), "stream %d: Recv after Stop: %v", i, err)
	}
}

func TestRocketMQHeartbeatTermination(t *testing.T) {
	b := brokertest.Start(t)
	c := dialV2(t, b.Addr())
	hb, err := c.Heartbeat(ctx(t), &rocketmqv2.HeartbeatRequest{ClientType: rocketmqv2.ClientType_PRODUCER})
	require.NoError(t, err)
	assert.Equal(t, rocketmqv2.Code_OK, hb.Status.GetCode())
	nt, err := c.NotifyClientTermination(ctx(t), &rocketmqv2.NotifyClientTerminationRequest{})
	require.NoError(t, err)
	assert.Equal(t, rocketmqv2.Code_OK, nt.Status.GetCode())
}
