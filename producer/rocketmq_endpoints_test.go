package producer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq/rmqtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRmqBrokerAddressFailsOver: when the proxy node a broker's connection
// uses goes away, the next send reaches the other node of the broker's
// endpoints, and each message is stored once.
func TestRmqBrokerAddressFailsOver(t *testing.T) {
	s1, s2 := rmqtest.Start(t), rmqtest.Start(t)
	for _, s := range []*rmqtest.Server{s1, s2} {
		s.SetSettings(rmqtest.Settings(0))
		s.SetRoute("t", rmqtest.QueueAt(t, "t", "broker-a", 0, s1.Addr, s2.Addr))
	}
	p, err := New(s1.Addr+";"+s2.Addr, WithProtocol(RocketMQ5))
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(context.Background())) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = p.Send(ctx, &Message{Topic: "t", Body: []byte("1")})
	require.NoError(t, err)
	sends := func(s *rmqtest.Server) (n int) {
		s.Seen(func(s *rmqtest.Server) { n = len(s.Sends) })
		return n
	}
	used, other := s1, s2
	if sends(s2) == 1 {
		used, other = s2, s1
	}
	require.Equal(t, 1, sends(used))
	used.Stop()
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
	t.Parallel()
	got, err := splitTarget(" 10.0.0.1:8081;10.0.0.2:8081, 10.0.0.3:8081; ", true)
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.1:8081", "10.0.0.2:8081", "10.0.0.3:8081"}, got)
	_, err = splitTarget("10.0.0.1:8081;;10.0.0.2:8081", true)
	assert.ErrorIs(t, err, ErrInvalidTarget)
	_, err = splitTarget("10.0.0.1:8081;10.0.0.2:8081", false)
	assert.ErrorIs(t, err, ErrInvalidTarget, "rocketry.v1 keeps its comma list")

	srv := rmqtest.Start(t)
	srv.SetSettings(rmqtest.Settings(0))
	srv.SetRoute("t", rmqtest.QueueOn(t, srv, "t", "broker-a", 0))
	p, err := New(rmqtest.ClosedAddr(t)+";"+srv.Addr, WithProtocol(RocketMQ5))
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(context.Background())) }()
	_, err = p.Send(context.Background(), &Message{Topic: "t", Body: []byte("x")})
	require.NoError(t, err)
	var se *SendError
	assert.False(t, errors.As(err, &se))
}
