package backoff

import (
	"math"
	"time"
)

// Step is one retry of a plan.
type Step struct {
	// Retry is the retry number, from 1 (the second attempt).
	Retry int
	// Phase is the retry's phase; PhaseBackoff for schedules without
	// phases.
	Phase Phase
	// Delay is the wait before the retry, from the start of the attempt
	// before it.
	Delay time.Duration
	// Elapsed is the sum of the delays up to and including this one: when
	// the retry starts, counted from the start of the first attempt, if
	// every attempt ends before its delay does. It saturates at the largest
	// Duration instead of overflowing.
	Elapsed time.Duration
}

// Plan lists the retries of s: retries 1..maxRetries, or fewer where s ends.
// A negative maxRetries means all of them, for a schedule that is Bounded
// with a non-negative Retries(); for one without an end it gives nil. r
// supplies the jitter, one call of s.Delay per retry in order (nil: none).
//
// Plan allocates the result once; the 100,015 retries of AWSManaged take
// about 3 MB.
func Plan(s Schedule, maxRetries int, r Rand) []Step {
	n := maxRetries
	if b, ok := s.(Bounded); ok {
		if total := b.Retries(); total >= 0 && (n < 0 || total < n) {
			n = total
		}
	}
	if n <= 0 {
		return nil
	}
	ph, _ := s.(Phaser)
	steps := make([]Step, 0, min(n, 1<<20))
	var elapsed time.Duration
	for i := 1; i <= n; i++ {
		d, ok := s.Delay(i, r)
		if !ok {
			break
		}
		d = max(d, 0)
		elapsed = satAdd(elapsed, d)
		phase := PhaseBackoff
		if ph != nil {
			phase = ph.Phase(i)
		}
		steps = append(steps, Step{Retry: i, Phase: phase, Delay: d, Elapsed: elapsed})
	}
	return steps
}

// Scale returns a schedule whose delays are those of s times f (f >= 0),
// for running real schedules fast in demos and tests: Scale(AWSManaged(),
// 0.001) waits milliseconds where the preset waits seconds. The result
// keeps the phases (Phaser) and length (Bounded) of s and, when s is an
// AttemptFloor, scales its MinAttemptTimeout too. A negative or NaN f
// counts as 0.
func Scale(s Schedule, f float64) Schedule {
	if !(f >= 0) {
		f = 0
	}
	return scaled{s: s, f: f}
}

type scaled struct {
	s Schedule
	f float64
}

func (c scaled) scale(d time.Duration) time.Duration {
	if math.IsInf(c.f, 1) && d > 0 {
		return math.MaxInt64
	}
	return seconds(d.Seconds() * c.f)
}

func (c scaled) Delay(n int, r Rand) (time.Duration, bool) {
	d, ok := c.s.Delay(n, r)
	return c.scale(d), ok
}

// Phase returns the phase of retry n in the underlying schedule.
func (c scaled) Phase(n int) Phase {
	if p, ok := c.s.(Phaser); ok {
		return p.Phase(n)
	}
	return phaseIf(n, PhaseBackoff)
}

// Retries returns the underlying schedule's length, or -1.
func (c scaled) Retries() int {
	if b, ok := c.s.(Bounded); ok {
		return b.Retries()
	}
	return -1
}

// MinAttemptTimeout returns the underlying schedule's, scaled, or 0.
func (c scaled) MinAttemptTimeout() time.Duration {
	if a, ok := c.s.(AttemptFloor); ok {
		return c.scale(a.MinAttemptTimeout())
	}
	return 0
}
