package wirermq

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/brokercode"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/message"
	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/producer/internal/send"
	"github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq/rmqtest"
	"github.com/rocketry-go/rocketry/senderr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestRmqThrottleSchedule(t *testing.T) {
	exp := &rocketmqv2.RetryPolicy{MaxAttempts: 9, Strategy: &rocketmqv2.RetryPolicy_ExponentialBackoff{ExponentialBackoff: &rocketmqv2.ExponentialBackoff{
		Initial: durationpb.New(100 * time.Millisecond), Max: durationpb.New(time.Second), Multiplier: 2,
	}}}
	s, ok := rmqThrottleSchedule(exp)
	require.True(t, ok)
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 60: time.Second} {
		d, ok := s.Delay(n, nil)
		if !ok || d != want {
			t.Errorf("exponential Delay(%d) = %v, %v; want %v, true", n, d, ok, want)
		}
	}
	_, ok = s.Delay(0, nil)
	assert.False(t, ok)

	cust := &rocketmqv2.RetryPolicy{Strategy: &rocketmqv2.RetryPolicy_CustomizedBackoff{CustomizedBackoff: &rocketmqv2.CustomizedBackoff{
		Next: []*durationpb.Duration{durationpb.New(time.Second), durationpb.New(5 * time.Second)},
	}}}
	s, ok = rmqThrottleSchedule(cust)
	require.True(t, ok)
	for n, want := range map[int]time.Duration{1: time.Second, 2: 5 * time.Second, 3: 5 * time.Second} {
		d, ok := s.Delay(n, nil)
		if !ok || d != want {
			t.Errorf("customized Delay(%d) = %v, %v; want %v, true", n, d, ok, want)
		}
	}

	for name, p := range map[string]*rocketmqv2.RetryPolicy{
		"nil":         nil,
		"no strategy": {MaxAttempts: 3},
		"no initial": {Strategy: &rocketmqv2.RetryPolicy_ExponentialBackoff{ExponentialBackoff: &rocketmqv2.ExponentialBackoff{
			Multiplier: 2,
		}}},
		"multiplier below 1": {Strategy: &rocketmqv2.RetryPolicy_ExponentialBackoff{ExponentialBackoff: &rocketmqv2.ExponentialBackoff{
			Initial: durationpb.New(time.Second), Multiplier: 0.5,
		}}},
		"empty list": {Strategy: &rocketmqv2.RetryPolicy_CustomizedBackoff{CustomizedBackoff: &rocketmqv2.CustomizedBackoff{}}},
	} {
		_, ok := rmqThrottleSchedule(p)
		assert.False(t, ok, name)
	}
}

// TestRmqMaxBodySize: a body over the server's max_body_size fails before
// any request, as Permanent MESSAGE_TOO_LARGE.
func TestRmqMaxBodySize(t *testing.T) {
	srv := rmqtest.Start(t)
	srv.SetSettings(rmqtest.Settings(4))
	srv.SetRoute("t", rmqtest.QueueOn(t, srv, "t", "broker-a", 0))
	c := newTestRMQClient(t, []string{srv.Addr})
	require.NoError(t, c.start(context.Background()))
	require.Equal(t, 4, c.maxBodySize())

	o, unsent := c.newCall(&message.Message{ID: "1", Topic: "t", Body: []byte("12345")}).attempt(context.Background(), 0, false, time.Time{})
	assert.Equal(t, outcome.Permanent, o.Kind)
	assert.Equal(t, brokercode.MessageTooLarge, o.Code)
	assert.True(t, errors.Is(o.Err, senderr.ErrInvalidMessage))
	assert.True(t, unsent)
	o, _ = c.newCall(&message.Message{ID: "2", Topic: "t", Body: []byte("1234")}).attempt(context.Background(), 0, false, time.Time{})
	assert.Equal(t, outcome.Stored, o.Kind, "%v", o.Err)
	srv.Seen(func(s *rmqtest.Server) { assert.Len(t, s.Sends, 1) })
}

// rmqCall is a send.Attempter.
var _ send.Attempter = (*rmqCall)(nil)

// TestRmqPacerPerBroker: endpoints on the same broker share one pacer,
// across sends; pacing off gives none.
func TestRmqPacerPerBroker(t *testing.T) {
	a, b := rmqtest.Start(t), rmqtest.Start(t)
	a.SetSettings(rmqtest.Settings(0))
	a.SetRoute("t", rmqtest.QueueOn(t, a, "t", "broker-a", 0), rmqtest.QueueOn(t, a, "t", "broker-a", 1), rmqtest.QueueOn(t, b, "t", "broker-b", 0))
	c := newTestRMQClient(t, []string{a.Addr})
	require.NoError(t, c.start(context.Background()))

	first := c.newCall(&message.Message{ID: "1", Topic: "t"})
	assert.Nil(t, first.Pacer(0).Endpoint, "route not known yet")
	o, _ := first.attempt(context.Background(), 0, false, time.Time{})
	require.Equal(t, outcome.Stored, o.Kind, "%v", o.Err)
	// Queues interleave a0 b0 a1: ep 0 and 2 are broker-a.
	require.NotNil(t, first.Pacer(0).Endpoint)
	assert.Same(t, first.Pacer(0).Endpoint, first.Pacer(2).Endpoint)
	assert.NotSame(t, first.Pacer(0).Endpoint, first.Pacer(1).Endpoint)
	second := c.newCall(&message.Message{ID: "2", Topic: "t"})
	assert.Same(t, first.Pacer(1).Endpoint, second.Pacer(1).Endpoint, "the route is read from the cache")
	assert.Same(t, first.Pacer(0).Topic, second.Pacer(0).Topic, "and the topic's pacer there")

	off := newTestRMQClient(t, []string{a.Addr}, func(c *Config) { c.Pacing = false })
	assert.Nil(t, off.newCall(&message.Message{ID: "3", Topic: "t"}).Pacer(0).Endpoint)
}

// An endpoint is named by its broker from the first attempt of a send
// whose topic's route is cached.
func TestRmqEndpointName(t *testing.T) {
	srv := rmqtest.Start(t)
	srv.SetSettings(rmqtest.Settings(0))
	srv.SetRoute("t", rmqtest.QueueOn(t, srv, "t", "broker-a", 0))
	c := newTestRMQClient(t, []string{srv.Addr})
	require.NoError(t, c.start(context.Background()))
	first := c.newCall(&message.Message{ID: "1", Topic: "t"})
	assert.Equal(t, "rocketmq:t", first.Endpoint(0))
	o, _ := first.attempt(context.Background(), 0, false, time.Time{})
	require.Equal(t, outcome.Stored, o.Kind, "%v", o.Err)
	assert.Equal(t, "broker-a", first.Endpoint(0))
	assert.Equal(t, "broker-a", c.newCall(&message.Message{ID: "2", Topic: "t"}).Endpoint(5))
}

// TestServerScheduleKeepsTheFallbacksAttemptFloor: with
// WithServerRetryPolicy, while the server has sent no policy the throttle
// schedule is the connection backoff, and its MIN_CONNECT_TIMEOUT (20 s per
// try) must stand; once the server's policy is in use there is no floor.
// The floor was lost before (serverSchedule did not pass it on).
func TestServerScheduleKeepsTheFallbacksAttemptFloor(t *testing.T) {
	conn, err := backoff.NewConnection(backoff.DefaultConfig) // the producer's default throttle schedule
	require.NoError(t, err)
	c := &rmqClient{}
	var s backoff.Schedule = serverSchedule{c: c, fallback: conn}
	f, ok := s.(backoff.AttemptFloor)
	if !assert.True(t, ok, "serverSchedule is not an AttemptFloor") {
		return
	}
	assert.Equal(t, 20*time.Second, f.MinAttemptTimeout(), "falling back to the connection backoff")

	c.policy.Store(&rocketmqv2.RetryPolicy{MaxAttempts: 3, Strategy: &rocketmqv2.RetryPolicy_ExponentialBackoff{ExponentialBackoff: &rocketmqv2.ExponentialBackoff{
		Initial: durationpb.New(100 * time.Millisecond), Max: durationpb.New(time.Second), Multiplier: 2,
	}}})
	assert.Equal(t, time.Duration(0), f.MinAttemptTimeout(), "the server's policy in use")
	d, ok := s.Delay(1, nil)
	assert.True(t, ok)
	assert.Equal(t, 100*time.Millisecond, d)
}
