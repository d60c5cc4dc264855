package producer

import "sync"

// retryBudget is the token bucket of gRPC's retry throttling (gRFC A6): it
// starts full at max tokens; every failed or throttled attempt takes one,
// every success gives back ratio, and retries are allowed only while more
// than max/2 tokens are left. A nil *retryBudget allows every retry. It is
// safe for concurrent use.
type retryBudget struct {
	mu     sync.Mutex
	max    float64
	ratio  float64
	tokens float64
}

func newRetryBudget(max, ratio float64) *retryBudget {
	return &retryBudget{max: max, ratio: ratio, tokens: max}
}

// throttle records a failed attempt and reports whether its retry must be
// refused.
func (b *retryBudget) throttle() bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = max(b.tokens-1, 0)
	return b.tokens <= b.max/2
}

// success records a successful attempt.
func (b *retryBudget) success() {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.tokens = min(b.tokens+b.ratio, b.max)
	b.mu.Unlock()
}
