package producer

import (
	"context"
	"testing"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq/rmqtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sendCount is how many SendMessage calls s has seen.
func sendCount(s *rmqtest.Server) (n int) {
	s.Seen(func(s *rmqtest.Server) { n = len(s.Sends) })
	return n
}

// TestRmqPinNamesBrokerAndAddresses is the regression test of issue 19's
// replay to a namesake: a RocketMQ 5 pin was a broker name alone, so a
// dead letter whose message may be stored on broker A (broker-a) was
// replayed onto a new broker B that took the same name. The pin now names
// the broker and its endpoints; a broker of that name at other addresses
// is refused with ErrEndpointUnknown, without a send.
func TestRmqPinNamesBrokerAndAddresses(t *testing.T) {
	t.Parallel()
	// Broker A answers 50400 (the proxy gave up waiting: maybe stored).
	a := rmqtest.Start(t)
	a.SetSettings(rmqtest.Settings(0))
	a.SetRoute("t", rmqtest.QueueOn(t, a, "t", "broker-a", 0))
	a.SetAnswer(func(*rocketmqv2.SendMessageRequest) *rocketmqv2.SendMessageResponse {
		return &rocketmqv2.SendMessageResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_PROXY_TIMEOUT, Message: "wait response timeout 3000ms"}}
	})
	sink := newMemSink()
	pa := newTestProducer(t, a.Addr, WithProtocol(RocketMQ5), WithMaxAttempts(1), WithDeadLetterSink(sink))
	m := &Message{Topic: "t", Body: []byte("x")}
	_, err := pa.Send(context.Background(), m)
	var se *SendError
	require.ErrorAs(t, err, &se)
	pin := "broker-a@" + a.Addr
	assert.Equal(t, pin, se.MaybeStoredAt, "the pin names the broker and its endpoints")
	d := sink.get(m.ID)
	require.NotNil(t, d)
	assert.Equal(t, pin, d.MaybeStoredAt)

	// Broker B, a new broker named broker-a at another address.
	b := rmqtest.Start(t)
	b.SetSettings(rmqtest.Settings(0))
	b.SetRoute("t", rmqtest.QueueOn(t, b, "t", "broker-a", 0))
	pb := newTestProducer(t, b.Addr, WithProtocol(RocketMQ5))
	_, err = pb.Resend(context.Background(), d)
	assert.ErrorIs(t, err, ErrEndpointUnknown)
	assert.ErrorContains(t, err, pin)
	assert.ErrorContains(t, err, "broker-a@"+b.Addr, "the error lists the brokers this producer has")
	assert.Zero(t, sendCount(b), "nothing sent to the namesake")

	// WithFailoverOnUnknownOutcome sends it as Send does.
	pf := newTestProducer(t, b.Addr, WithProtocol(RocketMQ5), WithFailoverOnUnknownOutcome())
	_, err = pf.Resend(context.Background(), d)
	require.NoError(t, err)
	assert.Equal(t, 1, sendCount(b))

	// A bare broker name (a dead letter written before pins named the
	// endpoints) matches by name alone, as before.
	bare := &DeadLetter{Message: &Message{ID: rmqID(pb), Topic: "t", Body: []byte("y")}, MaybeStoredAt: "broker-a"}
	_, err = pb.Resend(context.Background(), bare)
	require.NoError(t, err)
	assert.Equal(t, 2, sendCount(b))
}

// TestRmqPinAddressSet: a pin matches the broker of its name whose
// endpoints are the same set of addresses, in any order, and is sent
// there; the order the route gives does not matter.
func TestRmqPinAddressSet(t *testing.T) {
	t.Parallel()
	srv := rmqtest.Start(t)
	srv.SetSettings(rmqtest.Settings(0))
	other := rmqtest.ClosedAddr(t)
	srv.SetRoute("t",
		rmqtest.QueueAt(t, "t", "broker-a", 0, other),
		rmqtest.QueueAt(t, "t", "broker-a", 1, srv.Addr, other),
		rmqtest.QueueAt(t, "t", "broker-b", 0, srv.Addr))
	p := newTestProducer(t, srv.Addr, WithProtocol(RocketMQ5))
	for _, pin := range []string{"broker-a@" + srv.Addr + ";" + other, "broker-a@" + other + ";" + srv.Addr} {
		before := sendCount(srv)
		r, err := p.Resend(context.Background(), &DeadLetter{Message: &Message{ID: rmqID(p), Topic: "t", Body: []byte("x")}, MaybeStoredAt: pin})
		require.NoError(t, err, pin)
		assert.Equal(t, before+1, sendCount(srv))
		assert.Equal(t, int32(1), r.QueueID, "the queue of broker-a at both addresses: %s", pin)
	}
	_, err := p.Resend(context.Background(), &DeadLetter{Message: &Message{ID: rmqID(p), Topic: "t"}, MaybeStoredAt: "broker-b@" + other})
	assert.ErrorIs(t, err, ErrEndpointUnknown)
}
