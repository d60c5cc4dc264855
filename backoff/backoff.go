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

// Phaser is implemented by schedules whose retries fall into named phases,
// such as a DeliveryPolicy. Phase returns PhaseNone for a retry the schedule
// does not have.
type Phaser interface {
	Phase(n int) Phase
}

// Bounded is implemented by schedules that know their length. Retries
// returns the number of retries the schedule allows, or -1 when it has no
// last retry.
type Bounded interface {
	Retries() int
}

// Phase is the phase of a retry in a delivery policy (SNS's four phases).
// Schedules with a single phase, such as the connection backoff, report
// PhaseBackoff.
type Phase int

const (
	// PhaseNone is the phase of a retry that a schedule does not have.
	PhaseNone Phase = iota
	// PhaseImmediate retries come at once, without delay.
	PhaseImmediate
	// PhasePreBackoff retries wait the policy's minimum delay.
	PhasePreBackoff
	// PhaseBackoff retries follow the backoff function from the minimum
	// delay to the maximum.
	PhaseBackoff
	// PhasePostBackoff retries wait the policy's maximum delay.
	PhasePostBackoff
)

var phaseNames = [...]string{"none", "immediate", "pre-backoff", "backoff", "post-backoff"}

// String returns "immediate", "pre-backoff", "backoff", "post-backoff" or
// "none".
func (p Phase) String() string {
	if p < 0 || int(p) >= len(phaseNames) {
		return "none"
	}
	return phaseNames[p]
}

// Immediate is the schedule that retries at once, without limit: the
// default failure schedule.
var Immediate Schedule = immediate{}

type immediate struct{}

func (immediate) Delay(n int, _ Rand) (time.Duration, bool) { return 0, n >= 1 }

// Phase returns PhaseImmediate for n >= 1.
func (immediate) Phase(n int) Phase { return phaseIf(n, PhaseImmediate) }

// Retries returns -1: no last retry.
func (immediate) Retries() int { return -1 }

// Constant returns a schedule that waits d before every retry, without limit.
// A negative d counts as 0.
func Constant(d time.Duration) Schedule { return constant(max(d, 0)) }

type constant time.Duration

func (c constant) Delay(n int, _ Rand) (time.Duration, bool) { return time.Duration(c), n >= 1 }

// Phase returns PhaseBackoff for n >= 1.
func (constant) Phase(n int) Phase { return phaseIf(n, PhaseBackoff) }

// Retries returns -1: no last retry.
func (constant) Retries() int { return -1 }

func phaseIf(n int, p Phase) Phase {
	if n < 1 {
		return PhaseNone
	}
	return p
}

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
