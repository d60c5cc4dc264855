package producer_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/producer"
	"github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq/rmqtest"
)

// startV1Only starts a gRPC server on 127.0.0.1:0 that serves rocketry.v1
// only (every method unimplemented): what a RocketMQ 5 producer meets when
// pointed at a server of the other protocol.
func startV1Only(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	rocketryv1.RegisterMessagingServiceServer(srv, rocketryv1.UnimplementedMessagingServiceServer{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// TestWrongProtocolNamesTheOption: a producer pointed at a server of the
// other protocol fails at once, never retried, with ErrWrongProtocol, the
// server's UNIMPLEMENTED reachable, and the option to use in the text.
func TestWrongProtocolNamesTheOption(t *testing.T) {
	t.Parallel()
	t.Run("rocketry.v1 producer, RocketMQ 5 server", func(t *testing.T) {
		srv := rmqtest.Start(t)
		srv.SetSettings(rmqtest.Settings(0))
		p, err := producer.New(srv.Addr, producer.WithProtocol(producer.RocketryV1), producer.WithMaxAttempts(5))
		require.NoError(t, err)
		defer p.Close(context.Background())
		_, err = p.Send(context.Background(), &producer.Message{Topic: "t", Body: []byte("x")})
		require.Error(t, err)
		assert.ErrorIs(t, err, producer.ErrWrongProtocol)
		assert.Equal(t, codes.Unimplemented, status.Code(err))
		assert.Contains(t, err.Error(), "WithProtocol(RocketMQ5)")
		assert.Contains(t, err.Error(), "--protocol rocketmq")
		var se *producer.SendError
		require.True(t, errors.As(err, &se), "%T", err)
		assert.Equal(t, 1, se.Attempts, "attempts")
	})
	t.Run("RocketMQ 5 producer, rocketry.v1 server", func(t *testing.T) {
		addr := startV1Only(t)
		_, err := producer.New(addr, producer.WithProtocol(producer.RocketMQ5), producer.WithAttemptTimeout(time.Minute))
		require.Error(t, err)
		assert.ErrorIs(t, err, producer.ErrWrongProtocol)
		assert.Equal(t, codes.Unimplemented, status.Code(err))
		assert.Contains(t, err.Error(), "WithProtocol(RocketryV1)")
	})
}
