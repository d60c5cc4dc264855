package wirermq

import (
	"math"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
)

// rmqThrottleSchedule turns a server's backoff_policy into the throttle
// schedule WithServerRetryPolicy asks for, as the official clients read it:
//
//   - exponential_backoff: retry n waits initial * multiplier^(n-1), at most
//     max, without jitter (the Java client's ExponentialBackoffRetryPolicy);
//   - customized_backoff: retry n waits next[n-1], the last one repeating.
//
// The policy's max_attempts is not used: the official producers keep their
// own attempt count and take only the server's waits, and so does rocketry
// (WithMaxAttempts still counts). ok is false for a policy that cannot be
// read: nil, no strategy, a non-positive initial or multiplier below 1, an
// empty or negative list.
func rmqThrottleSchedule(p *rocketmqv2.RetryPolicy) (s backoff.Schedule, ok bool) {
	switch st := p.GetStrategy().(type) {
	case *rocketmqv2.RetryPolicy_ExponentialBackoff:
		e := st.ExponentialBackoff
		initial, maxD, mult := e.GetInitial().AsDuration(), e.GetMax().AsDuration(), float64(e.GetMultiplier())
		if initial <= 0 || math.IsNaN(mult) || math.IsInf(mult, 0) || mult < 1 {
			return nil, false
		}
		if maxD < initial {
			maxD = initial
		}
		return rmqExponential{initial: initial, max: maxD, mult: mult}, true
	case *rocketmqv2.RetryPolicy_CustomizedBackoff:
		next := make([]time.Duration, 0, len(st.CustomizedBackoff.GetNext()))
		for _, d := range st.CustomizedBackoff.GetNext() {
			if d.AsDuration() < 0 {
				return nil, false
			}
			next = append(next, d.AsDuration())
		}
		if len(next) == 0 {
			return nil, false
		}
		return rmqCustomized(next), true
	}
	return nil, false
}

// rmqExponential is the server's exponential backoff.
type rmqExponential struct {
	initial, max time.Duration
	mult         float64
}

func (e rmqExponential) Delay(n int, _ backoff.Rand) (time.Duration, bool) {
	if n < 1 {
		return 0, false
	}
	d := float64(e.initial) * math.Pow(e.mult, float64(n-1))
	if d >= float64(e.max) || math.IsInf(d, 0) || math.IsNaN(d) {
		return e.max, true
	}
	return time.Duration(d), true
}

// Retries is unbounded: the attempts are the producer's.
func (rmqExponential) Retries() int { return -1 }

// rmqCustomized is the server's list of waits.
type rmqCustomized []time.Duration

func (c rmqCustomized) Delay(n int, _ backoff.Rand) (time.Duration, bool) {
	if n < 1 {
		return 0, false
	}
	return c[min(n, len(c))-1], true
}

// Retries is unbounded: the attempts are the producer's.
func (rmqCustomized) Retries() int { return -1 }

// serverSchedule is the throttle schedule of WithServerRetryPolicy: the
// waits of the server's latest backoff_policy, or fallback while the server
// has sent none that can be read.
type serverSchedule struct {
	c        *rmqClient
	fallback backoff.Schedule
}

func (s serverSchedule) Delay(n int, r backoff.Rand) (time.Duration, bool) {
	return s.current().Delay(n, r)
}

// MinAttemptTimeout passes on the least time per try of the schedule in
// use: none for the server's policy, the fallback's (MIN_CONNECT_TIMEOUT
// for the connection backoff) while it stands in.
func (s serverSchedule) MinAttemptTimeout() time.Duration {
	if f, ok := s.current().(backoff.AttemptFloor); ok {
		return f.MinAttemptTimeout()
	}
	return 0
}

// current is the server's latest readable policy, or the fallback.
func (s serverSchedule) current() backoff.Schedule {
	if sch, ok := rmqThrottleSchedule(s.c.serverRetryPolicy()); ok {
		return sch
	}
	return s.fallback
}
