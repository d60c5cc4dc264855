package backoff

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// BackoffFunction is how the delays of a delivery policy's backoff phase
// climb from the minimum delay to the maximum (SNS's backoffFunction). The
// zero value is Linear, SNS's default.
//
// For a backoff phase of N retries, retry k of the phase (k = 1..N) has
// position j = k-1 out of M = N-1, t = j/M, and with min and max the delay
// targets, d = max-min and R = max/min:
//
//	Linear:      min + d*t                                constant steps
//	Exponential: min * R^t                                each delay R^(1/M) times the one before
//	Arithmetic:  min + d*(1 - (M-j)(M-j+1)/(M(M+1)))      steps of M, M-1, ..., 1 units
//	Geometric:   min + d*(1 - 3^-j)/(1 - 3^-M)            each step a third of the one before
//
// Every function gives min at the first retry of the phase and max at the
// last, and never decreases. Exponential grows slowly first and fast at the
// end; Arithmetic and Geometric grow fast first and flatten, Geometric
// more steeply. Whenever min < max they are strictly ordered at every
// retry strictly inside the phase:
//
//	Exponential < Linear < Arithmetic < Geometric
//
// so no two of them give the same delay there. A backoff phase of one
// retry waits min.
type BackoffFunction int

const (
	// Linear climbs in equal steps (SNS's default).
	Linear BackoffFunction = iota
	// Arithmetic climbs in steps that shrink by a constant amount.
	Arithmetic
	// Exponential multiplies the delay by a constant factor each retry.
	Exponential
	// Geometric climbs in steps that shrink by a constant factor (1/3).
	Geometric
)

// BackoffFunctions lists the four functions in SNS's (alphabetical) order.
var BackoffFunctions = []BackoffFunction{Arithmetic, Exponential, Geometric, Linear}

var functionNames = [...]string{"linear", "arithmetic", "exponential", "geometric"}

// String returns the function's SNS name: "linear", "arithmetic",
// "exponential" or "geometric".
func (f BackoffFunction) String() string {
	if f < 0 || int(f) >= len(functionNames) {
		return fmt.Sprintf("BackoffFunction(%d)", int(f))
	}
	return functionNames[f]
}

func (f BackoffFunction) valid() bool { return f >= 0 && int(f) < len(functionNames) }

// ParseBackoffFunction returns the function with SNS name s, in any letter
// case ("exponential", "EXPONENTIAL").
func ParseBackoffFunction(s string) (BackoffFunction, error) {
	for i, n := range functionNames {
		if strings.EqualFold(s, n) {
			return BackoffFunction(i), nil
		}
	}
	return 0, policyError("healthyRetryPolicy.backoffFunction", fmt.Sprintf("%q", s),
		"one of arithmetic, exponential, geometric, linear")
}

// At returns the delay of retry k (1..n) of a backoff phase of n retries
// going from min to max along f (see BackoffFunction for the formulas). k
// is clamped to 1..n; n < 1 and min > max are treated as one retry and
// max = min. The result is always within [min, max].
func (f BackoffFunction) At(k, n int, min, max time.Duration) time.Duration {
	if max < min {
		max = min
	}
	if n <= 1 || k <= 1 {
		return min
	}
	if k >= n {
		return max
	}
	lo, hi := min.Seconds(), max.Seconds()
	v := f.frac(k-1, n-1, lo, hi)
	d := seconds(v)
	// float rounding must never leave the targets.
	return clampDuration(d, min, max)
}

// frac evaluates the function at position j of m (0 < j < m) in seconds.
func (f BackoffFunction) frac(j, m int, lo, hi float64) float64 {
	t := float64(j) / float64(m)
	d := hi - lo
	switch f {
	case Exponential:
		if lo <= 0 {
			// R is undefined; fall back to the same shape from 1 ns.
			lo = 1e-9
		}
		return lo * math.Pow(hi/lo, t)
	case Arithmetic:
		r := float64(m-j) * float64(m-j+1) / (float64(m) * float64(m+1))
		return lo + d*(1-r)
	case Geometric:
		return lo + d*(1-math.Pow(3, -float64(j)))/(1-math.Pow(3, -float64(m)))
	default:
		return lo + d*t
	}
}

func clampDuration(d, lo, hi time.Duration) time.Duration {
	if d < lo {
		return lo
	}
	if d > hi {
		return hi
	}
	return d
}
