package producer

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/apache/rocketmq/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rmqQueueAt is a writable queue id of broker name whose endpoints are
// addrs (host:port each), as a route of a proxy cluster lists them.
func rmqQueueAt(t *testing.T, topic, name string, id int32, addrs ...string) *rocketmqv2.MessageQueue {
	t.Helper()
	ep := &rocketmqv2.Endpoints{Scheme: rocketmqv2.AddressScheme_IPv4}
	for _, a := range addrs {
		h, p, err := net.SplitHostPort(a)
		require.NoError(t, err)
		n, err := strconv.Atoi(p)
		require.NoError(t, err)
		ep.Addresses = append(ep.Addresses, &rocketmqv2.Address{Host: h, Port: int32(n)})
	}
	return &rocketmqv2.MessageQueue{
		Topic: &rocketmqv2.Resource{Name: topic}, Id: id, Permission: rocketmqv2.Permission_READ_WRITE,
		Broker:             &rocketmqv2.Broker{Name: name, Endpoints: ep},
		AcceptMessageTypes: []rocketmqv2.MessageType{rocketmqv2.MessageType_NORMAL},
	}
}

// TestRmqBrokerAddressFailsOver: when the proxy node a broker's connection
// uses goes away, the next send reaches the other node of the broker's
// endpoints, and each message is stored once.
func TestRmqBrokerAddressFailsOver(t *testing.T) {
	s1, s2 := startRMQServer(t), startRMQServer(t)
	for _, s := range []*rmqServer{s1, s2} {
		s.setSettings(rmqServerSettings(0))
		s.setRoute("t", rmqQueueAt(t, "t", "broker-a", 0, s1.addr, s2.addr))
	}
	p, err := New(s1.addr+";"+s2.addr, WithProtocol(RocketMQ5))
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(context.Background())) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = p.Send(ctx, &Message{Topic: "t", Body: []byte("1")})
	require.NoError(t, err)
	sends := func(s *rmqServer) (n int) {
		s.seen(func(s *rmqServer) { n = len(s.sends) })
		return n
	}
	used, other := s1, s2
	if sends(s2) == 1 {
		used, other = s2, s1
	}
	require.Equal(t, 1, sends(used))
	used.stop()
	for i := range 3 {
		_, err := p.Send(ctx, &Message{Topic: "t", Body: []byte("after")})
		require.NoError(t, err, "send %d after a node stopped", i)
	}
	assert.Equal(t, 3, sends(other), "every later send on the other node, once")
}

// TestRmqAccessPointsSemicolon: access points are taken as the official
// clients write them, host:port;host:port, as well as with commas; one of
// them closed does not stop the producer.
func TestRmqAccessPointsSemicolon(t *testing.T) {
	got, err := splitTarget(" 10.0.0.1:8081;10.0.0.2:8081, 10.0.0.3:8081; ", true)
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.1:8081", "10.0.0.2:8081", "10.0.0.3:8081"}, got)
	_, err = splitTarget("10.0.0.1:8081;;10.0.0.2:8081", true)
	assert.ErrorIs(t, err, ErrInvalidTarget)
	_, err = splitTarget("10.0.0.1:8081;10.0.0.2:8081", false)
	assert.ErrorIs(t, err, ErrInvalidTarget, "rocketry.v1 keeps its comma list")

	srv := startRMQServer(t)
	srv.setSettings(rmqServerSettings(0))
	srv.setRoute("t", rmqQueueOn(t, srv, "t", "broker-a", 0))
	p, err := New(closedAddr(t)+";"+srv.addr, WithProtocol(RocketMQ5))
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(context.Background())) }()
	_, err = p.Send(context.Background(), &Message{Topic: "t", Body: []byte("x")})
	require.NoError(t, err)
	var se *SendError
	assert.False(t, errors.As(err, &se))
}
