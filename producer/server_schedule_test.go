package producer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rocketry-go/rocketry/backoff"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/apache/rocketmq/v2"
)

// TestServerScheduleKeepsTheFallbacksAttemptFloor: with
// WithServerRetryPolicy, while the server has sent no policy the throttle
// schedule is the connection backoff, and its MIN_CONNECT_TIMEOUT (20 s per
// try) must stand; once the server's policy is in use there is no floor.
// The floor was lost before (serverSchedule did not pass it on).
func TestServerScheduleKeepsTheFallbacksAttemptFloor(t *testing.T) {
	c := &rmqClient{}
	var s backoff.Schedule = serverSchedule{c: c, fallback: defaultThrottle}
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
