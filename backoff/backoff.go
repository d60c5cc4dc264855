package backoff

import (
	"math"
	"time"
)

// Rand is a source of uniform random numbers in [0, 1). *math/rand/v2.Rand
// satisfies it. Schedules take it as an argument so that tests are exact; a
// nil Rand means no jitter.
type Rand interface {
	Float64() float64
}

// Schedule gives the wait before each retry.
//
// Retries, not attempts, are numbered here: retry 1 is the second attempt.
// A send with MaxAttempts n makes at most n-1 retries.
//
// Implementations are immutable and safe for concurrent use; per-call state
// (the retry number) is the caller's.
type Schedule interface {
	// Delay returns the wait before retry n (n >= 1), counted from the start
	// of the attempt before it, and ok=false when the schedule allows no
	// retry n. r supplies the jitter; nil means none.
	Delay(n int, r Rand) (d time.Duration, ok bool)
}

// AttemptFloor is implemented by schedules that give each try a least time,
// such as the connection backoff's MIN_CONNECT_TIMEOUT. A caller gives the
// attempt after a wait on such a schedule at least MinAttemptTimeout.
type AttemptFloor interface {
	MinAttemptTimeout() time.Duration
}

// Immediate is the schedule that retries at once, without limit: the
// default failure schedule.
var Immediate Schedule = immediate{}

type immediate struct{}

func (immediate) Delay(n int, _ Rand) (time.Duration, bool) { return 0, n >= 1 }

// Constant returns a schedule that waits d before every retry, without limit.
func Constant(d time.Duration) Schedule { return constant(d) }

type constant time.Duration

func (c constant) Delay(n int, _ Rand) (time.Duration, bool) { return time.Duration(c), n >= 1 }

// seconds converts a non-negative float of seconds to a Duration, saturating
// at the largest Duration instead of overflowing.
func seconds(s float64) time.Duration {
	ns := s * float64(time.Second)
	if math.IsNaN(ns) || ns <= 0 {
		return 0
	}
	if ns >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// jitter scales d by a uniform factor in [1-j, 1+j] drawn from r.
func jitter(d time.Duration, j float64, r Rand) time.Duration {
	if r == nil || j == 0 {
		return d
	}
	return seconds(d.Seconds() * (1 + j*(2*r.Float64()-1)))
}
