package send

import "sync"

// Budget is the token bucket of gRPC's retry throttling (gRFC A6): it
// starts full at max tokens; every failed or throttled attempt takes one,
// every success gives back ratio, and retries are allowed only while more
// than max/2 tokens are left. A nil *Budget allows every retry. It is
// safe for concurrent use.
type Budget struct {
	mu     sync.Mutex
	max    float64
	ratio  float64
	tokens float64
}

// NewBudget returns a full budget of max tokens, giving back ratio per
// success.
func NewBudget(max, ratio float64) *Budget {
	return &Budget{max: max, ratio: ratio, tokens: max}
}

// throttle records a failed attempt and reports whether its retry must be
// refused.
func (b *Budget) throttle() bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = max(b.tokens-1, 0)
	return b.tokens <= b.max/2
}

// success records a successful attempt.
func (b *Budget) success() {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.tokens = min(b.tokens+b.ratio, b.max)
	b.mu.Unlock()
}
