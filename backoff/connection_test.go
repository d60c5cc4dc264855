package backoff

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestDefaultConfig(t *testing.T) {
	want := Config{
		BaseDelay:         time.Second,
		Multiplier:        1.6,
		Jitter:            0.2,
		MaxDelay:          120 * time.Second,
		MinConnectTimeout: 20 * time.Second,
	}
	if DefaultConfig != want {
		t.Fatalf("DefaultConfig = %+v; want %+v", DefaultConfig, want)
	}
	c, err := NewConnection(DefaultConfig)
	if err != nil {
		t.Fatalf("NewConnection(DefaultConfig) = %v", err)
	}
	if got := c.Config(); got != want {
		t.Errorf("Config() = %+v; want %+v", got, want)
	}
	if got := c.MinAttemptTimeout(); got != 20*time.Second {
		t.Errorf("MinAttemptTimeout() = %v; want 20s", got)
	}
	if got := c.Retries(); got != -1 {
		t.Errorf("Retries() = %d; want -1", got)
	}
}

func mustConnection(t testing.TB, cfg Config) *Connection {
	t.Helper()
	c, err := NewConnection(cfg)
	if err != nil {
		t.Fatalf("NewConnection(%+v) = %v", cfg, err)
	}
	return c
}

func TestConnectionNoJitter(t *testing.T) {
	c := mustConnection(t, DefaultConfig)
	// min(1.6^(n-1), 120) seconds, rounded to the microsecond.
	want := []float64{1, 1.6, 2.56, 4.096, 6.5536, 10.48576, 16.777216, 26.843546, 42.949673,
		68.719477, 109.951163, 120, 120, 120, 120}
	for i, w := range want {
		n := i + 1
		d, ok := c.Delay(n, nil)
		if !ok {
			t.Fatalf("Delay(%d, nil) ok = false; want true", n)
		}
		if got := secs(d); got != w {
			t.Errorf("Delay(%d, nil) = %v; want %vs", n, d, w)
		}
		if p := c.Phase(n); p != PhaseBackoff {
			t.Errorf("Phase(%d) = %v; want backoff", n, p)
		}
	}
	if _, ok := c.Delay(0, nil); ok {
		t.Errorf("Delay(0, nil) ok = true; want false")
	}
}

func TestConnectionFirstRetryIsExact(t *testing.T) {
	c := mustConnection(t, DefaultConfig)
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		if d, _ := c.Delay(1, r); d != time.Second {
			t.Fatalf("seed %d: Delay(1, r) = %v; want exactly 1s", seed, d)
		}
	}
	// Also at the edges of the random range.
	for _, f := range []float64{0, 0.5, 0.999999} {
		if d, _ := c.Delay(1, fixed(f)); d != time.Second {
			t.Errorf("Delay(1, fixed(%v)) = %v; want 1s", f, d)
		}
	}
}

type fixed float64

func (f fixed) Float64() float64 { return float64(f) }

func TestConnectionJitterBoundsAndMean(t *testing.T) {
	c := mustConnection(t, DefaultConfig)
	const seeds = 4000
	for n := 2; n <= 14; n++ {
		nominal, _ := c.Delay(n, nil)
		lo, hi := 0.8*nominal.Seconds(), 1.2*nominal.Seconds()
		var sum float64
		for seed := range uint64(seeds) {
			r := rand.New(rand.NewPCG(seed, uint64(n)))
			d, _ := c.Delay(n, r)
			s := d.Seconds()
			if s < lo-1e-9 || s > hi+1e-9 {
				t.Fatalf("seed %d: Delay(%d, r) = %v; want within [%v, %v]", seed, n, d, lo, hi)
			}
			sum += s
		}
		mean := sum / seeds
		// The mean of a uniform on [0.8x, 1.2x] over 4000 draws has a
		// standard error of 0.4x/sqrt(12*4000) = 0.0018x; allow 4 of them.
		if rel := math.Abs(mean/nominal.Seconds() - 1); rel > 0.0073 {
			t.Errorf("retry %d: mean delay %.4fs over %d seeds; want %.4fs within 0.73%%", n, mean, seeds, nominal.Seconds())
		}
	}
}

func TestConnectionHugeRetryNumbers(t *testing.T) {
	c := mustConnection(t, DefaultConfig)
	for _, n := range []int{100, 1_000, 1_000_000, math.MaxInt32, math.MaxInt} {
		d, ok := c.Delay(n, nil)
		if !ok || d != 120*time.Second {
			t.Errorf("Delay(%d, nil) = %v, %v; want 120s, true", n, d, ok)
		}
		d, _ = c.Delay(n, fixed(0.999999))
		if d < 96*time.Second || d > 144*time.Second {
			t.Errorf("Delay(%d, fixed(0.999999)) = %v; want in [96s, 144s]", n, d)
		}
	}
	// A config whose MaxDelay is the largest Duration must not overflow.
	big := mustConnection(t, Config{BaseDelay: time.Hour, Multiplier: 10, Jitter: 0.5, MaxDelay: math.MaxInt64})
	for _, n := range []int{2, 20, 1_000_000} {
		for _, f := range []float64{0, 0.5, 0.999999} {
			if d, _ := big.Delay(n, fixed(f)); d <= 0 {
				t.Errorf("big.Delay(%d, fixed(%v)) = %v; want > 0", n, f, d)
			}
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"zero base", func(c *Config) { c.BaseDelay = 0 }, "BaseDelay"},
		{"negative base", func(c *Config) { c.BaseDelay = -time.Second }, "BaseDelay"},
		{"multiplier below 1", func(c *Config) { c.Multiplier = 0.5 }, "Multiplier"},
		{"multiplier NaN", func(c *Config) { c.Multiplier = math.NaN() }, "Multiplier"},
		{"multiplier Inf", func(c *Config) { c.Multiplier = math.Inf(1) }, "Multiplier"},
		{"jitter negative", func(c *Config) { c.Jitter = -0.1 }, "Jitter"},
		{"jitter 1", func(c *Config) { c.Jitter = 1 }, "Jitter"},
		{"jitter NaN", func(c *Config) { c.Jitter = math.NaN() }, "Jitter"},
		{"max below base", func(c *Config) { c.MaxDelay = 500 * time.Millisecond }, "MaxDelay"},
		{"negative connect timeout", func(c *Config) { c.MinConnectTimeout = -1 }, "MinConnectTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig
			tt.edit(&cfg)
			_, err := NewConnection(cfg)
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("NewConnection(%+v) = %v; want ErrInvalidConfig", cfg, err)
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("NewConnection(%+v) = %v; want a FieldError naming %s", cfg, err, tt.field)
			}
		})
	}
	ok := []Config{DefaultConfig, {BaseDelay: 1, Multiplier: 1, MaxDelay: 1}}
	for _, cfg := range ok {
		if err := cfg.Validate(); err != nil {
			t.Errorf("%+v.Validate() = %v; want nil", cfg, err)
		}
	}
}
