package backoff

import (
	"fmt"
	"math"
	"time"
)

// Config is the gRPC connection-backoff algorithm's parameters
// (grpc/grpc connection-backoff.md). It is only data; see [Connection].
type Config struct {
	// BaseDelay is INITIAL_BACKOFF, the wait before the first retry.
	BaseDelay time.Duration
	// Multiplier is MULTIPLIER, the factor between nominal delays; >= 1.
	Multiplier float64
	// Jitter is JITTER, the fraction in [0, 1) by which every delay after the
	// first is randomized, uniformly in [-Jitter, +Jitter].
	Jitter float64
	// MaxDelay is MAX_BACKOFF, the largest nominal delay.
	MaxDelay time.Duration
	// MinConnectTimeout is MIN_CONNECT_TIMEOUT: the least time a try is
	// given. It is not a delay.
	MinConnectTimeout time.Duration
}

// DefaultConfig is the gRPC connection backoff: 1 s, x1.6, jitter 0.2, at
// most 120 s, at least 20 s per try.
var DefaultConfig = Config{
	BaseDelay:         1 * time.Second,
	Multiplier:        1.6,
	Jitter:            0.2,
	MaxDelay:          120 * time.Second,
	MinConnectTimeout: 20 * time.Second,
}

// Validate reports the first field that is out of range, as a *FieldError
// wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	switch {
	case c.BaseDelay <= 0:
		return configError("BaseDelay", c.BaseDelay, "> 0")
	case math.IsNaN(c.Multiplier) || c.Multiplier < 1 || math.IsInf(c.Multiplier, 0):
		return configError("Multiplier", c.Multiplier, ">= 1 and finite")
	case math.IsNaN(c.Jitter) || c.Jitter < 0 || c.Jitter >= 1:
		return configError("Jitter", c.Jitter, "in [0, 1)")
	case c.MaxDelay < c.BaseDelay:
		return configError("MaxDelay", c.MaxDelay, fmt.Sprintf(">= BaseDelay (%v)", c.BaseDelay))
	case c.MinConnectTimeout < 0:
		return configError("MinConnectTimeout", c.MinConnectTimeout, ">= 0")
	}
	return nil
}

// Connection is the connection-backoff schedule of a validated Config.
type Connection struct{ cfg Config }

// NewConnection validates cfg and returns its schedule.
func NewConnection(cfg Config) (*Connection, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Connection{cfg: cfg}, nil
}

// Config returns the schedule's parameters.
func (c *Connection) Config() Config { return c.cfg }

// Delay returns the wait before retry n, counted from the start of the try
// before it: BaseDelay for retry 1 (no jitter), then
// min(BaseDelay*Multiplier^(n-1), MaxDelay) jittered by +/-Jitter. The
// schedule has no end; ok is false only for n < 1. Any n is safe: the power
// is taken in float64 and capped before conversion, so nothing overflows.
func (c *Connection) Delay(n int, r Rand) (time.Duration, bool) {
	if n < 1 {
		return 0, false
	}
	if n == 1 {
		return c.cfg.BaseDelay, true
	}
	nominal := c.cfg.BaseDelay.Seconds() * math.Pow(c.cfg.Multiplier, float64(n-1))
	if max := c.cfg.MaxDelay.Seconds(); !(nominal < max) {
		nominal = max
	}
	return jitter(seconds(nominal), c.cfg.Jitter, r), true
}

// MinAttemptTimeout returns MinConnectTimeout.
func (c *Connection) MinAttemptTimeout() time.Duration { return c.cfg.MinConnectTimeout }

// Phase returns PhaseBackoff for every retry n >= 1: the connection backoff
// has a single phase. It returns PhaseNone for n < 1.
func (c *Connection) Phase(n int) Phase {
	if n < 1 {
		return PhaseNone
	}
	return PhaseBackoff
}

// Retries returns -1: the connection backoff has no last retry.
func (c *Connection) Retries() int { return -1 }
