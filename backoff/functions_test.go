package backoff

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestBackoffFunctionNames(t *testing.T) {
	for _, f := range BackoffFunctions {
		for _, s := range []string{f.String(), strings.ToUpper(f.String())} {
			got, err := ParseBackoffFunction(s)
			if err != nil || got != f {
				t.Errorf("ParseBackoffFunction(%q) = %v, %v; want %v", s, got, err, f)
			}
		}
	}
	if _, err := ParseBackoffFunction("cubic"); err == nil || !strings.Contains(err.Error(), "backoffFunction") {
		t.Errorf("ParseBackoffFunction(\"cubic\") = %v; want an error naming backoffFunction", err)
	}
	if BackoffFunction(0) != Linear {
		t.Errorf("zero BackoffFunction = %v; want linear", BackoffFunction(0))
	}
}

// The worked values of the doc comment: 1 s to 60 s over 5 retries.
func TestBackoffFunctionValues(t *testing.T) {
	const lo, hi = time.Second, 60 * time.Second
	want := map[BackoffFunction][]float64{
		Linear:      {1, 15.75, 30.5, 45.25, 60},
		Exponential: {1, 2.783158, 7.745967, 21.558247, 60},
		Arithmetic:  {1, 24.6, 42.3, 54.1, 60},
		Geometric:   {1, 40.825, 54.1, 58.525, 60},
	}
	for f, ws := range want {
		for k, w := range ws {
			got := secs(f.At(k+1, len(ws), lo, hi))
			if got != w {
				t.Errorf("%v.At(%d, %d, 1s, 60s) = %vs; want %vs", f, k+1, len(ws), got, w)
			}
		}
	}
}

func TestBackoffFunctionShortPhases(t *testing.T) {
	for _, f := range BackoffFunctions {
		if got := f.At(1, 1, time.Second, time.Minute); got != time.Second {
			t.Errorf("%v.At(1, 1, 1s, 1m) = %v; want 1s (a one-retry phase waits min)", f, got)
		}
		if got := f.At(2, 2, time.Second, time.Minute); got != time.Minute {
			t.Errorf("%v.At(2, 2, 1s, 1m) = %v; want 1m", f, got)
		}
		if got := f.At(0, 0, time.Second, time.Minute); got != time.Second {
			t.Errorf("%v.At(0, 0, 1s, 1m) = %v; want 1s", f, got)
		}
	}
}

// Property: for random targets and lengths, every function starts at min,
// ends at max, never decreases, and at every interior retry
// Exponential < Linear < Arithmetic < Geometric when min < max.
func TestBackoffFunctionProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	order := []BackoffFunction{Exponential, Linear, Arithmetic, Geometric}
	for range 3000 {
		lo := time.Duration(1+r.IntN(3600)) * time.Second
		hi := lo + time.Duration(r.IntN(3601))*time.Second
		if r.IntN(4) == 0 {
			hi = lo
		}
		n := 1 + r.IntN(120)
		if r.IntN(50) == 0 {
			n = 1 + r.IntN(100_000)
		}
		for _, f := range BackoffFunctions {
			if got := f.At(1, n, lo, hi); got != lo {
				t.Fatalf("%v.At(1, %d, %v, %v) = %v; want min", f, n, lo, hi, got)
			}
			if n > 1 {
				if got := f.At(n, n, lo, hi); got != hi {
					t.Fatalf("%v.At(%d, %d, %v, %v) = %v; want max", f, n, n, lo, hi, got)
				}
			}
		}
		if n > 2000 {
			continue // the pairwise check below is quadratic enough
		}
		prev := make([]time.Duration, len(order))
		for k := 1; k <= n; k++ {
			for i, f := range order {
				d := f.At(k, n, lo, hi)
				if d < prev[i] || d < lo || d > hi {
					t.Fatalf("%v.At(%d, %d, %v, %v) = %v after %v; want non-decreasing within [min, max]", f, k, n, lo, hi, d, prev[i])
				}
				prev[i] = d
				if i > 0 && k > 1 && k < n && lo < hi && !(prev[i-1] < d) {
					t.Fatalf("retry %d of %d, %v..%v: %v gives %v, %v gives %v; want %v < %v",
						k, n, lo, hi, order[i-1], prev[i-1], f, d, order[i-1], f)
				}
			}
		}
	}
}

// secs returns d rounded to the microsecond, in seconds, correctly rounded
// (time.Duration.Seconds is not: 2.783158s gives 2.7831580000000002).
func secs(d time.Duration) float64 { return float64(d.Round(time.Microsecond)) / 1e9 }

func stringsContains(s, sub string) bool { return strings.Contains(s, sub) }
