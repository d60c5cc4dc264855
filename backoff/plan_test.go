package backoff

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestPlanConnection(t *testing.T) {
	c := mustConnection(t, DefaultConfig)
	steps := Plan(c, 15, nil)
	if len(steps) != 15 {
		t.Fatalf("Plan(connection, 15, nil) has %d steps; want 15", len(steps))
	}
	var elapsed time.Duration
	for i, s := range steps {
		d, _ := c.Delay(i+1, nil)
		elapsed += d
		if s.Retry != i+1 || s.Phase != PhaseBackoff || s.Delay != d || s.Elapsed != elapsed {
			t.Errorf("step %d = %+v; want retry %d, backoff, %v, elapsed %v", i, s, i+1, d, elapsed)
		}
	}
	if got := Plan(c, -1, nil); got != nil {
		t.Errorf("Plan(connection, -1, nil) = %d steps; want nil (no end)", len(got))
	}
}

func TestPlanPolicyStopsAtItsEnd(t *testing.T) {
	p := CustomerManaged()
	for _, max := range []int{-1, 50, 1000} {
		if got := len(Plan(p, max, nil)); got != 50 {
			t.Errorf("Plan(customer-managed, %d, nil) has %d steps; want 50", max, got)
		}
	}
	if got := len(Plan(p, 7, nil)); got != 7 {
		t.Errorf("Plan(customer-managed, 7, nil) has %d steps; want 7", got)
	}
	steps := Plan(AWSManaged(), -1, rand.New(rand.NewPCG(1, 2)))
	if len(steps) != 100_015 {
		t.Fatalf("Plan(aws-managed, -1, r) has %d steps; want 100015", len(steps))
	}
	last := steps[len(steps)-1]
	if last.Retry != 100_015 || last.Phase != PhasePostBackoff {
		t.Errorf("last step = %+v; want retry 100015, post-backoff", last)
	}
	// 100,000 x 20 s +/- 10% jitter averages out close to 2,000,000 s.
	if days := last.Elapsed.Hours() / 24; days < 22.5 || days > 23.7 {
		t.Errorf("aws-managed elapsed = %.2f days; want about 23", days)
	}
}

func TestPlanSaturates(t *testing.T) {
	big := Constant(math.MaxInt64 / 2)
	steps := Plan(big, 5, nil)
	if last := steps[len(steps)-1]; last.Elapsed != math.MaxInt64 {
		t.Errorf("Plan(huge constant) elapsed = %v; want the largest Duration", last.Elapsed)
	}
	if got := Plan(Immediate, 3, nil); len(got) != 3 || got[0].Phase != PhaseImmediate || got[2].Elapsed != 0 {
		t.Errorf("Plan(Immediate, 3, nil) = %+v; want 3 immediate steps", got)
	}
}

func TestScale(t *testing.T) {
	s := Scale(AWSManaged(), 0.001)
	if b, ok := s.(Bounded); !ok || b.Retries() != 100_015 {
		t.Fatalf("Scale(aws-managed).Retries() lost")
	}
	if d, _ := s.Delay(100_015, nil); d != 20*time.Millisecond {
		t.Errorf("scaled Delay(100015) = %v; want 20ms", d)
	}
	if p := s.(Phaser).Phase(4); p != PhasePreBackoff {
		t.Errorf("scaled Phase(4) = %v; want pre-backoff", p)
	}
	c := Scale(mustConnection(t, DefaultConfig), 0.01)
	if got := c.(AttemptFloor).MinAttemptTimeout(); got != 200*time.Millisecond {
		t.Errorf("scaled MinAttemptTimeout() = %v; want 200ms", got)
	}
	if d, _ := c.Delay(1_000_000, nil); d != 1200*time.Millisecond {
		t.Errorf("scaled Delay(1e6) = %v; want 1.2s", d)
	}
	if d, _ := Scale(Constant(time.Second), -3).Delay(1, nil); d != 0 {
		t.Errorf("Scale(_, -3) delay = %v; want 0", d)
	}
}

// Property test over random valid policies: phase counts add up, the
// backoff phase goes from min to max without decreasing, no delay is
// negative, and the jittered delays stay within the jitter of nominal.
func TestPolicyProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 13))
	checked := 0
	for checked < 2000 {
		h := HealthyRetryPolicy{
			MinDelayTarget:  1 + r.IntN(120),
			NumRetries:      r.IntN(101),
			BackoffFunction: BackoffFunctions[r.IntN(4)],
		}
		h.MaxDelayTarget = h.MinDelayTarget + r.IntN(200)
		rest := h.NumRetries
		for _, c := range []*int{&h.NumNoDelayRetries, &h.NumMinDelayRetries, &h.NumMaxDelayRetries} {
			*c = r.IntN(rest/2 + 1)
			rest -= *c
		}
		p, err := NewDeliveryPolicy(h)
		if err != nil {
			continue // over the hour: fine, try another
		}
		checked++
		checkPolicy(t, p, r)
	}
	checkPolicy(t, CustomerManaged(), r)
}

func checkPolicy(t *testing.T, p *DeliveryPolicy, r Rand) {
	t.Helper()
	h := p.HealthyRetryPolicy()
	lo := time.Duration(h.MinDelayTarget) * time.Second
	hi := time.Duration(h.MaxDelayTarget) * time.Second
	counts := phaseCounts(p)
	want := map[Phase]int{PhaseImmediate: h.NumNoDelayRetries, PhasePreBackoff: h.NumMinDelayRetries,
		PhaseBackoff: h.BackoffRetries(), PhasePostBackoff: h.NumMaxDelayRetries}
	if !equalCounts(counts, want) {
		t.Fatalf("%+v: phase counts %v; want %v", h, counts, want)
	}
	var prev time.Duration
	var first = true
	var total time.Duration
	for n := 1; n <= p.Retries(); n++ {
		d, ok := p.Delay(n, nil)
		if !ok || d < 0 {
			t.Fatalf("%+v: Delay(%d, nil) = %v, %v", h, n, d, ok)
		}
		total += d
		jd, _ := p.Delay(n, r)
		if jd < 0 || float64(jd) < float64(d)*(1-p.Jitter())-1 || float64(jd) > float64(d)*(1+p.Jitter())+1 {
			t.Fatalf("%+v: jittered Delay(%d) = %v; want within %v of %v", h, n, jd, p.Jitter(), d)
		}
		if p.Phase(n) != PhaseBackoff {
			continue
		}
		if first && d != lo {
			t.Fatalf("%+v: first backoff delay %v; want %v", h, d, lo)
		}
		if !first && d < prev {
			t.Fatalf("%+v: backoff delay of retry %d %v < %v before it", h, n, d, prev)
		}
		first, prev = false, d
	}
	if h.BackoffRetries() > 1 && prev != hi {
		t.Fatalf("%+v: last backoff delay %v; want %v", h, prev, hi)
	}
	if total != p.TotalDelay() {
		t.Fatalf("%+v: sum of delays %v; TotalDelay() = %v", h, total, p.TotalDelay())
	}
	if _, ok := p.Delay(p.Retries()+1, nil); ok {
		t.Fatalf("%+v: Delay(%d) ok past the end", h, p.Retries()+1)
	}
}

// go test -run XXX -bench PlanAWSManaged -benchmem ./backoff
func BenchmarkPlanAWSManaged(b *testing.B) {
	p := AWSManaged()
	r := rand.New(rand.NewPCG(1, 2))
	for b.Loop() {
		if steps := Plan(p, -1, r); len(steps) != 100_015 {
			b.Fatalf("Plan has %d steps", len(steps))
		}
	}
}
