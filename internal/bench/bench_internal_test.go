package bench

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rocketry-go/rocketry/producer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseList(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{in: "rocketry", want: []string{"rocketry"}},
		{in: " rocketry , naive-sleep,", want: []string{"rocketry", "naive-sleep"}},
		{in: "", wantErr: true},
		{in: "rocketry,nope", wantErr: true},
	} {
		got, err := ParseList(tc.in, ScenarioContenders)
		if (err != nil) != tc.wantErr || len(got) != len(tc.want) {
			t.Errorf("ParseList(%q) = %q, %v; want %q (error %v)", tc.in, got, err, tc.want, tc.wantErr)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("ParseList(%q) = %q; want %q", tc.in, got, tc.want)
			}
		}
		if tc.in == "rocketry,nope" && !errors.Is(err, errUnknown) {
			t.Errorf("ParseList(%q) error = %v; want errUnknown", tc.in, err)
		}
	}
}

func TestScaledConnection(t *testing.T) {
	c := ScaledConnection(0.01)
	if c.BaseDelay != 10*time.Millisecond || c.MaxDelay != 1200*time.Millisecond || c.MinConnectTimeout != 200*time.Millisecond ||
		c.Multiplier != 1.6 || c.Jitter != 0.2 {
		t.Errorf("ScaledConnection(0.01) = %+v; want 10ms, x1.6, 0.2, 1.2s, 200ms", c)
	}
}

// TestTimingRecorder feeds one send's events with known times: attempt 1 at
// 0, retry after 10 ms scheduled, attempt 2 at 12 ms: 2 ms late.
func TestTimingRecorder(t *testing.T) {
	r := newTimingRecorder()
	sh := r.shard("m")
	r.observe(producer.Event{Kind: producer.EventAttempt, MessageID: "m", Attempt: 1})
	r.observe(producer.Event{Kind: producer.EventRetry, MessageID: "m", Attempt: 1, Delay: 10 * time.Millisecond})
	sh.mu.Lock()
	p := sh.pending["m"]
	p.attemptAt = p.attemptAt.Add(-12 * time.Millisecond) // attempt 1 started 12 ms ago
	sh.pending["m"] = p
	sh.mu.Unlock()
	r.observe(producer.Event{Kind: producer.EventAttempt, MessageID: "m", Attempt: 2})
	r.observe(producer.Event{Kind: producer.EventSuccess, MessageID: "m", Attempt: 2})
	got := r.result()
	if got.Retries != 1 || got.P50ms < 2 || got.P50ms > 3 || got.Early != 0 {
		t.Errorf("result() = %+v; want 1 retry about 2 ms late", got)
	}
	if len(sh.pending) != 0 {
		t.Errorf("pending = %v after success; want empty", sh.pending)
	}
}

func TestMedian(t *testing.T) {
	rs := []*Result{
		{Contender: "x", Goodput: 1, Lost: 1, Timing: &Timing{Retries: 2, P99ms: 5}},
		{Contender: "x", Goodput: 3, Timing: &Timing{Retries: 3, P99ms: 1}},
		{Contender: "x", Goodput: 2, Timing: &Timing{Retries: 4, P99ms: 3}},
	}
	m := Median(rs)
	if m.Goodput != 2 || m.Lost != 1 || m.Runs != 3 || m.Timing.Retries != 9 || m.Timing.P99ms != 3 {
		t.Errorf("Median = %+v (timing %+v); want goodput 2, lost 1 (summed), 3 runs, 9 retries, p99 3", m, m.Timing)
	}
}
