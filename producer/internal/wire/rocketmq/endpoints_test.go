package wirermq

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/message"
	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq/rmqtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRmqBrokerSeveralAddresses: a broker whose route lists two addresses,
// one of them closed, is reached through the other, whichever comes first,
// on the first attempt.
func TestRmqBrokerSeveralAddresses(t *testing.T) {
	srv := rmqtest.Start(t)
	srv.SetSettings(rmqtest.Settings(0))
	dead := rmqtest.ClosedAddr(t)
	srv.SetRoute("dead-first", rmqtest.QueueAt(t, "dead-first", "broker-a", 0, dead, srv.Addr))
	srv.SetRoute("live-first", rmqtest.QueueAt(t, "live-first", "broker-a", 0, srv.Addr, dead))
	c := newTestRMQClient(t, []string{srv.Addr})
	require.NoError(t, c.start(context.Background()))
	for _, topic := range []string{"dead-first", "live-first"} {
		for i := range 4 { // the addresses are shuffled per connection: several sends, one connection
			call := c.newCall(&message.Message{ID: topic + strconv.Itoa(i), Topic: topic})
			o, unsent := call.attempt(context.Background(), 0, false, time.Time{})
			require.Equal(t, outcome.Stored, o.Kind, "%s: %v", topic, o.Err)
			assert.False(t, unsent)
			assert.Equal(t, "broker-a", call.Endpoint(0))
		}
	}
}
