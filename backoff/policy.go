package backoff

import (
	"fmt"
	"math"
	"time"
)

// SNS's limits for a custom delivery policy. The presets are exempt from
// MaxPolicyRetries and MaxPolicyTotal, as SNS's own policies are.
const (
	// MaxDelayTargetLimit is the largest maxDelayTarget, in seconds.
	MaxDelayTargetLimit = 3600
	// MaxPolicyRetries is the largest numRetries of a custom policy.
	MaxPolicyRetries = 100
	// MaxPolicyTotal is the longest total retry time of a custom policy:
	// the sum of the nominal (unjittered) delays of all its retries.
	MaxPolicyTotal = 3600 * time.Second
)

// DefaultPolicyJitter is the jitter a DeliveryPolicy gets unless told
// otherwise: every non-zero delay is scaled by a uniform factor in
// [0.9, 1.1]. SNS jitters its retries too, without saying by how much.
// Turn it off with WithJitter(0), or pass a nil Rand.
const DefaultPolicyJitter = 0.1

// HealthyRetryPolicy is SNS's healthyRetryPolicy, in SNS's units: delays
// in whole seconds. NewDeliveryPolicy takes the values as they are, so
// start from DefaultHealthyRetryPolicy, whose values are SNS's defaults.
type HealthyRetryPolicy struct {
	// MinDelayTarget is the delay of the pre-backoff phase and the start of
	// the backoff phase, in seconds: 1..MaxDelayTarget.
	MinDelayTarget int
	// MaxDelayTarget is the delay of the post-backoff phase and the end of
	// the backoff phase, in seconds: MinDelayTarget..3600.
	MaxDelayTarget int
	// NumRetries is the total number of retries (not attempts: the first
	// attempt is not counted): 0..100.
	NumRetries int
	// NumNoDelayRetries is the number of immediate retries, >= 0.
	NumNoDelayRetries int
	// NumMinDelayRetries is the number of pre-backoff retries, >= 0.
	NumMinDelayRetries int
	// NumMaxDelayRetries is the number of post-backoff retries, >= 0. The
	// three counts together are at most NumRetries; the rest of NumRetries
	// make the backoff phase.
	NumMaxDelayRetries int
	// BackoffFunction is the backoff phase's curve; the zero value is
	// Linear, SNS's default.
	BackoffFunction BackoffFunction
}

// DefaultHealthyRetryPolicy returns SNS's defaults: 3 retries, all in the
// backoff phase, at 20 s, linear.
func DefaultHealthyRetryPolicy() HealthyRetryPolicy {
	return HealthyRetryPolicy{MinDelayTarget: 20, MaxDelayTarget: 20, NumRetries: 3}
}

// BackoffRetries returns the length of the backoff phase: NumRetries minus
// the three other phases.
func (h HealthyRetryPolicy) BackoffRetries() int {
	return h.NumRetries - h.NumNoDelayRetries - h.NumMinDelayRetries - h.NumMaxDelayRetries
}

// validate checks h against SNS's constraints; preset policies skip the
// limits on retries and total time.
func (h HealthyRetryPolicy) validate(custom bool) error {
	const p = "healthyRetryPolicy."
	switch {
	case h.MinDelayTarget < 1:
		return policyError(p+"minDelayTarget", h.MinDelayTarget,
			fmt.Sprintf("1..maxDelayTarget (%d) seconds", h.MaxDelayTarget))
	case h.MaxDelayTarget < 1 || h.MaxDelayTarget > MaxDelayTargetLimit:
		return policyError(p+"maxDelayTarget", h.MaxDelayTarget,
			fmt.Sprintf("minDelayTarget (%d)..%d seconds", h.MinDelayTarget, MaxDelayTargetLimit))
	case h.MinDelayTarget > h.MaxDelayTarget:
		return policyError(p+"minDelayTarget", h.MinDelayTarget,
			fmt.Sprintf("1..maxDelayTarget (%d) seconds", h.MaxDelayTarget))
	case h.NumRetries < 0 || custom && h.NumRetries > MaxPolicyRetries:
		return policyError(p+"numRetries", h.NumRetries, fmt.Sprintf("0..%d", MaxPolicyRetries))
	case h.NumNoDelayRetries < 0:
		return policyError(p+"numNoDelayRetries", h.NumNoDelayRetries, ">= 0")
	case h.NumMinDelayRetries < 0:
		return policyError(p+"numMinDelayRetries", h.NumMinDelayRetries, ">= 0")
	case h.NumMaxDelayRetries < 0:
		return policyError(p+"numMaxDelayRetries", h.NumMaxDelayRetries, ">= 0")
	case !h.BackoffFunction.valid():
		return policyError(p+"backoffFunction", h.BackoffFunction,
			"one of arithmetic, exponential, geometric, linear")
	}
	// Add in int64 so that huge counts cannot wrap around.
	sum := int64(h.NumNoDelayRetries) + int64(h.NumMinDelayRetries) + int64(h.NumMaxDelayRetries)
	if sum > int64(h.NumRetries) {
		return policyError(p+"numNoDelayRetries+numMinDelayRetries+numMaxDelayRetries", sum,
			fmt.Sprintf("<= numRetries (%d)", h.NumRetries))
	}
	if custom {
		if total := (&DeliveryPolicy{h: h}).TotalDelay(); total > MaxPolicyTotal {
			return policyError(p+"total retry time", fmt.Sprintf("%gs", total.Seconds()),
				fmt.Sprintf("0..%g seconds for a custom policy", MaxPolicyTotal.Seconds()))
		}
	}
	return nil
}

// DeliveryPolicy is an SNS delivery policy as a Schedule: NumRetries
// retries in four phases (see Phase) with jittered delays. It is immutable
// and safe for concurrent use. Make one with NewDeliveryPolicy, ParsePolicy
// or Preset.
type DeliveryPolicy struct {
	h           HealthyRetryPolicy
	jitter      float64
	maxReceives float64 // 0: no throttle policy
	contentType string  // "": not set
	name        string  // preset name, "" for a custom policy
}

// NewDeliveryPolicy validates h with SNS's constraints for a custom policy
// and returns its schedule with DefaultPolicyJitter, no throttle policy
// and no request policy. A refusal is a *FieldError wrapping
// ErrInvalidPolicy that names the field by its JSON path.
func NewDeliveryPolicy(h HealthyRetryPolicy) (*DeliveryPolicy, error) {
	if err := h.validate(true); err != nil {
		return nil, err
	}
	return &DeliveryPolicy{h: h, jitter: DefaultPolicyJitter}, nil
}

// WithJitter returns a copy of p whose non-zero delays are scaled by a
// uniform factor in [1-j, 1+j]; j must be in [0, 1), and 0 turns jitter off.
func (p *DeliveryPolicy) WithJitter(j float64) (*DeliveryPolicy, error) {
	if math.IsNaN(j) || j < 0 || j >= 1 {
		return nil, policyError("jitter", j, "in [0, 1)")
	}
	c := *p
	c.jitter = j
	return &c, nil
}

// WithMaxReceivesPerSecond returns a copy of p with SNS's
// throttlePolicy.maxReceivesPerSecond set to r (>= 1), or removed (r = 0).
func (p *DeliveryPolicy) WithMaxReceivesPerSecond(r float64) (*DeliveryPolicy, error) {
	if r != 0 && !(r >= 1 && !math.IsInf(r, 0)) {
		return nil, policyError("throttlePolicy.maxReceivesPerSecond", r, ">= 1 (or 0 for none)")
	}
	c := *p
	c.maxReceives = r
	return &c, nil
}

// HealthyRetryPolicy returns the policy's parameters.
func (p *DeliveryPolicy) HealthyRetryPolicy() HealthyRetryPolicy { return p.h }

// Name returns the preset's name ("aws-managed", "customer-managed") or ""
// for a custom policy.
func (p *DeliveryPolicy) Name() string { return p.name }

// Jitter returns the jitter fraction (0: none).
func (p *DeliveryPolicy) Jitter() float64 { return p.jitter }

// MaxReceivesPerSecond returns throttlePolicy.maxReceivesPerSecond, or 0
// when the policy has no throttle policy.
func (p *DeliveryPolicy) MaxReceivesPerSecond() float64 { return p.maxReceives }

// HeaderContentType returns requestPolicy.headerContentType, or "" when the
// policy does not set it.
func (p *DeliveryPolicy) HeaderContentType() string { return p.contentType }

// Retries returns NumRetries, the number of retries the policy allows.
func (p *DeliveryPolicy) Retries() int { return p.h.NumRetries }

// Phase returns the phase of retry n: the first NumNoDelayRetries retries
// are PhaseImmediate, the next NumMinDelayRetries PhasePreBackoff, the next
// BackoffRetries() PhaseBackoff and the last NumMaxDelayRetries
// PhasePostBackoff. It returns PhaseNone when n is not in 1..Retries().
func (p *DeliveryPolicy) Phase(n int) Phase {
	ph, _ := p.locate(n)
	return ph
}

// locate returns the phase of retry n and its 1-based index in the phase.
func (p *DeliveryPolicy) locate(n int) (Phase, int) {
	h := p.h
	if n < 1 || n > h.NumRetries {
		return PhaseNone, 0
	}
	if n <= h.NumNoDelayRetries {
		return PhaseImmediate, n
	}
	n -= h.NumNoDelayRetries
	if n <= h.NumMinDelayRetries {
		return PhasePreBackoff, n
	}
	n -= h.NumMinDelayRetries
	if b := h.BackoffRetries(); n <= b {
		return PhaseBackoff, n
	}
	return PhasePostBackoff, n - h.BackoffRetries()
}

// nominal returns the unjittered delay of retry n and its phase.
func (p *DeliveryPolicy) nominal(n int) (time.Duration, Phase) {
	ph, k := p.locate(n)
	lo := time.Duration(p.h.MinDelayTarget) * time.Second
	hi := time.Duration(p.h.MaxDelayTarget) * time.Second
	switch ph {
	case PhasePreBackoff:
		return lo, ph
	case PhaseBackoff:
		return p.h.BackoffFunction.At(k, p.h.BackoffRetries(), lo, hi), ph
	case PhasePostBackoff:
		return hi, ph
	}
	return 0, ph
}

// Delay returns the wait before retry n (1..Retries()), counted from the
// start of the attempt before it: 0 in the immediate phase,
// MinDelayTarget in the pre-backoff phase, the backoff function's value in
// the backoff phase and MaxDelayTarget in the post-backoff phase, each
// scaled by a uniform factor in [1-Jitter, 1+Jitter] drawn from r (nil: no
// jitter). ok is false when the policy has no retry n.
func (p *DeliveryPolicy) Delay(n int, r Rand) (time.Duration, bool) {
	d, ph := p.nominal(n)
	if ph == PhaseNone {
		return 0, false
	}
	return jitter(d, p.jitter, r), true
}

// TotalDelay returns the sum of the nominal (unjittered) delays of all the
// policy's retries: the least time a message can spend retrying. For a
// custom policy it is at most MaxPolicyTotal.
func (p *DeliveryPolicy) TotalDelay() time.Duration {
	h := p.h
	lo := time.Duration(h.MinDelayTarget) * time.Second
	hi := time.Duration(h.MaxDelayTarget) * time.Second
	total := satMul(lo, h.NumMinDelayRetries)
	total = satAdd(total, satMul(hi, h.NumMaxDelayRetries))
	for k := 1; k <= h.BackoffRetries(); k++ {
		total = satAdd(total, h.BackoffFunction.At(k, h.BackoffRetries(), lo, hi))
	}
	return total
}

// satAdd adds two non-negative durations, saturating at the largest one.
func satAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// satMul multiplies a non-negative duration by n >= 0, saturating.
func satMul(d time.Duration, n int) time.Duration {
	if n <= 0 || d <= 0 {
		return 0
	}
	if d > math.MaxInt64/time.Duration(n) {
		return math.MaxInt64
	}
	return d * time.Duration(n)
}
