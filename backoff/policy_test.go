package backoff

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// snsExample is the example policy of SNS's documentation (and issue 2).
const snsExample = `{"healthyRetryPolicy":{"minDelayTarget":1,"maxDelayTarget":60,"numRetries":50,"numNoDelayRetries":3,"numMinDelayRetries":2,"numMaxDelayRetries":35,"backoffFunction":"exponential"},"throttlePolicy":{"maxReceivesPerSecond":10}}`

func phaseCounts(p *DeliveryPolicy) map[Phase]int {
	c := map[Phase]int{}
	for n := 1; n <= p.Retries(); n++ {
		c[p.Phase(n)]++
	}
	return c
}

func TestSNSExamplePolicy(t *testing.T) {
	p, err := ParsePolicy([]byte(snsExample))
	if err != nil {
		t.Fatalf("ParsePolicy(example) = %v", err)
	}
	if p.Retries() != 50 || p.MaxReceivesPerSecond() != 10 || p.Jitter() != DefaultPolicyJitter || p.Name() != "" {
		t.Errorf("ParsePolicy(example) = %d retries, %v/s, jitter %v, name %q; want 50, 10, %v, \"\"",
			p.Retries(), p.MaxReceivesPerSecond(), p.Jitter(), p.Name(), DefaultPolicyJitter)
	}
	want := map[Phase]int{PhaseImmediate: 3, PhasePreBackoff: 2, PhaseBackoff: 10, PhasePostBackoff: 35}
	if got := phaseCounts(p); !equalCounts(got, want) {
		t.Errorf("phase counts = %v; want %v", got, want)
	}
	steps := []struct {
		n     int
		phase Phase
		delay time.Duration
	}{
		{1, PhaseImmediate, 0}, {3, PhaseImmediate, 0},
		{4, PhasePreBackoff, time.Second}, {5, PhasePreBackoff, time.Second},
		{6, PhaseBackoff, time.Second}, {15, PhaseBackoff, time.Minute},
		{16, PhasePostBackoff, time.Minute}, {50, PhasePostBackoff, time.Minute},
		{51, PhaseNone, 0}, {0, PhaseNone, 0}, {-1, PhaseNone, 0},
	}
	for _, s := range steps {
		d, ok := p.Delay(s.n, nil)
		if d != s.delay || ok != (s.phase != PhaseNone) || p.Phase(s.n) != s.phase {
			t.Errorf("Delay(%d, nil), Phase(%d) = %v, %v, %v; want %v, %v, %v",
				s.n, s.n, d, ok, p.Phase(s.n), s.delay, s.phase != PhaseNone, s.phase)
		}
	}
	if d, _ := p.Delay(1, fixed(0.9)); d != 0 {
		t.Errorf("Delay(1, r) = %v; want 0: immediate retries are not jittered", d)
	}
}

func equalCounts(a, b map[Phase]int) bool {
	for _, ph := range []Phase{PhaseNone, PhaseImmediate, PhasePreBackoff, PhaseBackoff, PhasePostBackoff} {
		if a[ph] != b[ph] {
			return false
		}
	}
	return true
}

func TestPresets(t *testing.T) {
	tests := []struct {
		name    string
		p       *DeliveryPolicy
		retries int
		counts  map[Phase]int
		lo, hi  time.Duration
		total   time.Duration // at least
	}{
		{PresetAWSManaged, AWSManaged(), 100_015,
			map[Phase]int{PhaseImmediate: 3, PhasePreBackoff: 2, PhaseBackoff: 10, PhasePostBackoff: 100_000},
			time.Second, 20 * time.Second, 23 * 24 * time.Hour},
		{PresetCustomerManaged, CustomerManaged(), 50,
			map[Phase]int{PhasePreBackoff: 2, PhaseBackoff: 10, PhasePostBackoff: 38},
			10 * time.Second, 600 * time.Second, 6 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Preset(tt.name)
			if err != nil {
				t.Fatalf("Preset(%q) = %v", tt.name, err)
			}
			if p.Name() != tt.name || p.Retries() != tt.retries || tt.p.Retries() != tt.retries {
				t.Errorf("Preset(%q) = %q with %d retries; want %d", tt.name, p.Name(), p.Retries(), tt.retries)
			}
			if got := phaseCounts(p); !equalCounts(got, tt.counts) {
				t.Errorf("phase counts = %v; want %v", got, tt.counts)
			}
			h := p.HealthyRetryPolicy()
			if h.BackoffFunction != Exponential {
				t.Errorf("BackoffFunction = %v; want exponential", h.BackoffFunction)
			}
			first := h.NumNoDelayRetries + h.NumMinDelayRetries + 1
			if d, _ := p.Delay(first, nil); d != tt.lo {
				t.Errorf("first backoff delay = %v; want %v", d, tt.lo)
			}
			if d, _ := p.Delay(first+9, nil); d != tt.hi {
				t.Errorf("last backoff delay = %v; want %v", d, tt.hi)
			}
			if total := p.TotalDelay(); total < tt.total || total > tt.total+24*time.Hour {
				t.Errorf("TotalDelay() = %v; want about %v", total, tt.total)
			}
		})
	}
	_, err := Preset("aws")
	if !errors.Is(err, ErrUnknownPreset) || !contains(err.Error(), "aws-managed", "customer-managed") {
		t.Errorf("Preset(\"aws\") = %v; want ErrUnknownPreset listing the names", err)
	}
}

func TestNewDeliveryPolicy(t *testing.T) {
	h := DefaultHealthyRetryPolicy()
	p, err := NewDeliveryPolicy(h)
	if err != nil {
		t.Fatalf("NewDeliveryPolicy(default) = %v", err)
	}
	for n := 1; n <= 3; n++ {
		if d, ok := p.Delay(n, nil); d != 20*time.Second || !ok || p.Phase(n) != PhaseBackoff {
			t.Errorf("default Delay(%d) = %v, %v, %v; want 20s, true, backoff", n, d, ok, p.Phase(n))
		}
	}
	tests := []struct {
		name  string
		edit  func(*HealthyRetryPolicy)
		field string
	}{
		{"min 0", func(h *HealthyRetryPolicy) { h.MinDelayTarget = 0 }, "healthyRetryPolicy.minDelayTarget"},
		{"min above max", func(h *HealthyRetryPolicy) { h.MinDelayTarget = 30 }, "healthyRetryPolicy.minDelayTarget"},
		{"max 0", func(h *HealthyRetryPolicy) { h.MaxDelayTarget = 0 }, "healthyRetryPolicy.maxDelayTarget"},
		{"max 3601", func(h *HealthyRetryPolicy) { h.MaxDelayTarget = 3601 }, "healthyRetryPolicy.maxDelayTarget"},
		{"retries 101", func(h *HealthyRetryPolicy) { h.NumRetries = 101; h.MinDelayTarget = 1; h.MaxDelayTarget = 1 }, "healthyRetryPolicy.numRetries"},
		{"retries -1", func(h *HealthyRetryPolicy) { h.NumRetries = -1 }, "healthyRetryPolicy.numRetries"},
		{"no delay -1", func(h *HealthyRetryPolicy) { h.NumNoDelayRetries = -1 }, "healthyRetryPolicy.numNoDelayRetries"},
		{"min delay -1", func(h *HealthyRetryPolicy) { h.NumMinDelayRetries = -1 }, "healthyRetryPolicy.numMinDelayRetries"},
		{"max delay -1", func(h *HealthyRetryPolicy) { h.NumMaxDelayRetries = -1 }, "healthyRetryPolicy.numMaxDelayRetries"},
		{"phases over total", func(h *HealthyRetryPolicy) { h.NumNoDelayRetries = 2; h.NumMaxDelayRetries = 2 }, "numMaxDelayRetries"},
		{"function 9", func(h *HealthyRetryPolicy) { h.BackoffFunction = 9 }, "healthyRetryPolicy.backoffFunction"},
		{"total over an hour", func(h *HealthyRetryPolicy) { h.NumRetries = 100; h.MaxDelayTarget = 100; h.MinDelayTarget = 100 }, "total retry time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := DefaultHealthyRetryPolicy()
			tt.edit(&h)
			_, err := NewDeliveryPolicy(h)
			if !errors.Is(err, ErrInvalidPolicy) || !contains(err.Error(), tt.field) {
				t.Errorf("NewDeliveryPolicy(%+v) = %v; want ErrInvalidPolicy naming %s", h, err, tt.field)
			}
		})
	}
	// Exactly an hour is allowed.
	h = HealthyRetryPolicy{MinDelayTarget: 36, MaxDelayTarget: 36, NumRetries: 100}
	if _, err := NewDeliveryPolicy(h); err != nil {
		t.Errorf("NewDeliveryPolicy(100 x 36s) = %v; want nil (3600 s is allowed)", err)
	}
}

func TestWithJitter(t *testing.T) {
	p := CustomerManaged()
	off, err := p.WithJitter(0)
	if err != nil {
		t.Fatalf("WithJitter(0) = %v", err)
	}
	if d, _ := off.Delay(1, fixed(0.99)); d != 10*time.Second {
		t.Errorf("no-jitter Delay(1, r) = %v; want 10s", d)
	}
	if p.Jitter() != DefaultPolicyJitter {
		t.Errorf("WithJitter changed the original: Jitter() = %v", p.Jitter())
	}
	for seed := range uint64(500) {
		r := rand.New(rand.NewPCG(seed, 3))
		for n := 1; n <= p.Retries(); n++ {
			nom, _ := p.Delay(n, nil)
			d, _ := p.Delay(n, r)
			if float64(d) < 0.9*float64(nom)-1 || float64(d) > 1.1*float64(nom)+1 {
				t.Fatalf("seed %d: Delay(%d, r) = %v; want within 10%% of %v", seed, n, d, nom)
			}
		}
	}
	for _, j := range []float64{-0.1, 1, 2} {
		if _, err := p.WithJitter(j); !errors.Is(err, ErrInvalidPolicy) || !contains(err.Error(), "jitter") {
			t.Errorf("WithJitter(%v) = %v; want an error naming jitter", j, err)
		}
	}
	if _, err := p.WithMaxReceivesPerSecond(0.5); !contains(errString(err), "maxReceivesPerSecond") {
		t.Errorf("WithMaxReceivesPerSecond(0.5) = %v; want an error naming maxReceivesPerSecond", err)
	}
	if q, err := p.WithMaxReceivesPerSecond(5); err != nil || q.MaxReceivesPerSecond() != 5 {
		t.Errorf("WithMaxReceivesPerSecond(5) = %v; want 5/s", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !stringsContains(s, sub) {
			return false
		}
	}
	return true
}
