package wirermq

import (
	"context"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/rocketry-go/rocketry/message"
	"github.com/rocketry-go/rocketry/outcome"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRmqAgainstBundledBroker runs the RocketMQ 5 client against the
// bundled broker's apache.rocketmq.v2 face: Settings on start, a route,
// a stored message, and the broker's own INTERNAL fault as 50001.
func TestRmqAgainstBundledBroker(t *testing.T) {
	b := brokertest.Start(t, broker.WithBrokerName("broker-a"), broker.WithQueues(2))
	c := newTestRMQClient(t, []string{b.Addr()})
	require.NoError(t, c.start(context.Background()))

	m := &message.Message{ID: c.ids.next(), Topic: "orders", Tag: "t", Keys: []string{"k"}, Body: []byte("hello")}
	call := c.newCall(m)
	o, unsent := call.attempt(context.Background(), 1, true, time.Time{})
	require.Equal(t, outcome.Stored, o.Kind, "%v", o.Err)
	assert.False(t, unsent)
	assert.Equal(t, "broker-a", call.Endpoint(1))
	q, _, _, ok := call.result()
	assert.True(t, ok)
	assert.Equal(t, int32(1), q)
	got := b.Messages("orders")
	require.Len(t, got, 1)
	assert.Equal(t, m.ID, got[0].GetMessage().GetMessageId())
	assert.Equal(t, []byte("hello"), got[0].GetMessage().GetBody())

	require.NoError(t, b.SetFaults(broker.Faults{InternalRate: 1}))
	o, unsent = c.newCall(&message.Message{ID: c.ids.next(), Topic: "orders", Body: []byte("x")}).attempt(context.Background(), 0, true, time.Time{})
	assert.Equal(t, outcome.FailedUnknown, o.Kind, "50001 says nothing of storage: %v", o.Err)
	assert.Equal(t, int32(50001), o.WireCode)
	assert.False(t, unsent)
}
