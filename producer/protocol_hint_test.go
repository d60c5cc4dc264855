package producer_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/producer"
	"github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq/rmqtest"
)

// TestWrongProtocolNamesTheOption: a producer pointed at a server of the
// other protocol fails at once, never retried, with ErrWrongProtocol, the
// server's UNIMPLEMENTED reachable, and the option to use in the text.
func TestWrongProtocolNamesTheOption(t *testing.T) {
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
}
