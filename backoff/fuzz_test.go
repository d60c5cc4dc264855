package backoff

import (
	"math/rand/v2"
	"testing"
)

// FuzzParsePolicy: no input panics, and an accepted policy has the declared
// number of retries, none with a negative delay, and passes checkPolicy.
// Seeds are in testdata/fuzz/FuzzParsePolicy and below.
func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte(snsExample))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"healthyRetryPolicy":{"numRetries":100,"minDelayTarget":1,"maxDelayTarget":36,"backoffFunction":"geometric"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePolicy(data)
		if err != nil {
			if p != nil {
				t.Fatalf("ParsePolicy(%q) = %v and a policy", data, err)
			}
			return
		}
		h := p.HealthyRetryPolicy()
		if p.Retries() != h.NumRetries || h.NumRetries < 0 || h.NumRetries > MaxPolicyRetries {
			t.Fatalf("ParsePolicy(%q): Retries() = %d, NumRetries %d", data, p.Retries(), h.NumRetries)
		}
		if got := len(Plan(p, -1, nil)); got != h.NumRetries {
			t.Fatalf("ParsePolicy(%q): Plan has %d steps; want %d", data, got, h.NumRetries)
		}
		if p.TotalDelay() > MaxPolicyTotal {
			t.Fatalf("ParsePolicy(%q): TotalDelay() = %v over the limit", data, p.TotalDelay())
		}
		checkPolicy(t, p, rand.New(rand.NewPCG(1, uint64(len(data)))))
	})
}
