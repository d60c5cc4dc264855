package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"golang.org/x/time/rate"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestJain(t *testing.T) {
	for _, tc := range []struct {
		x    []float64
		want float64
	}{
		{[]float64{5, 5, 5, 5}, 1},
		{[]float64{8, 0, 0, 0}, 0.25},
		{[]float64{1, 3}, 0.8}, // 16 / (2 * 10)
		{[]float64{0, 0}, 1},
		{nil, 0},
	} {
		if got := Jain(tc.x); !near(got, tc.want) {
			t.Errorf("Jain(%v) = %v; want %v", tc.x, got, tc.want)
		}
	}
}

func TestCapacity(t *testing.T) {
	steps := []RateStep{{10 * time.Second, 500}, {20 * time.Second, 3000}}
	for _, tc := range []struct {
		a, b time.Duration
		want float64
	}{
		{0, 30 * time.Second, 20000 + 5000 + 30000},
		{2 * time.Second, 11 * time.Second, 8*2000 + 500},
		{19 * time.Second, 21 * time.Second, 500 + 3000},
		{25 * time.Second, 26 * time.Second, 3000},
		{5 * time.Second, 5 * time.Second, 0},
		{6 * time.Second, 5 * time.Second, 0},
	} {
		if got := Capacity(2000, steps, tc.a, tc.b); !near(got, tc.want) {
			t.Errorf("Capacity(2000, %v, %v, %v) = %v; want %v", steps, tc.a, tc.b, got, tc.want)
		}
	}
	if got := Capacity(2000, nil, time.Second, 1500*time.Millisecond); !near(got, 1000) {
		t.Errorf("Capacity(2000, no steps, 1s, 1.5s) = %v; want 1000", got)
	}
}

func TestParseSteps(t *testing.T) {
	got, err := ParseSteps(" 10s:500, 20s:3000 ")
	want := []RateStep{{10 * time.Second, 500}, {20 * time.Second, 3000}}
	if err != nil || len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("ParseSteps = %v, %v; want %v", got, err, want)
	}
	if back, err := ParseSteps(FormatSteps(got)); err != nil || len(back) != 2 || back[1] != want[1] {
		t.Errorf("ParseSteps(FormatSteps(%v)) = %v, %v; want them back", got, back, err)
	}
	if got, err := ParseSteps(""); got != nil || err != nil {
		t.Errorf("ParseSteps(\"\") = %v, %v; want no steps", got, err)
	}
	for _, s := range []string{"10s", "x:500", "10s:0", "10s:-1", "0s:5", "-1s:5", "20s:1,10s:2", "10s:1,10s:2", "10s:NaN", "10s:Inf", "10s:500,"} {
		_, err := ParseSteps(s)
		if err == nil || !strings.Contains(err.Error(), "--steps") {
			t.Errorf("ParseSteps(%q) = %v; want an error naming --steps", s, err)
		}
	}
}

// binsOf returns per-producer bins of 100 ms up to d: producer p stores
// rate(p, t) in the bin that starts at t.
func binsOf(n int, d time.Duration, rate func(p int, t time.Duration) int64) fleetBins {
	b := fleetBins{bin: 100 * time.Millisecond, per: make([][]int64, n)}
	for p := range n {
		for t := time.Duration(0); t < d; t += b.bin {
			b.per[p] = append(b.per[p], rate(p, t))
		}
	}
	return b
}

func TestWorstNewcomer(t *testing.T) {
	starts := []time.Duration{0, 2 * time.Second, 4 * time.Second}
	// Producer 0 and 1 store 10 a bin from their start, producer 2 5.
	b := binsOf(3, 10*time.Second, func(p int, t time.Duration) int64 {
		switch {
		case t < starts[p]:
			return 0
		case p == 2:
			return 5
		}
		return 10
	})
	// Producer 1 in [6s, 7s): 100 of the mean of 100, 100, 50; producer 2
	// in [8s, 9s): 50 of the same mean.
	// The median of two is the lower.
	p, share, median, ok := b.worstNewcomer(starts, 10*time.Second)
	if !ok || p != 2 || !near(share, 50/(250.0/3)) || median != share {
		t.Errorf("worstNewcomer = %d, %v (median %v), %v; want producer 2 at 0.6, median 0.6", p, share, median, ok)
	}
	// Ending at 8.5 s, producer 2's window is not over: producer 1 only.
	p, share, median, ok = b.worstNewcomer(starts, 8500*time.Millisecond)
	if !ok || p != 1 || !near(share, 100/(250.0/3)) || median != share {
		t.Errorf("worstNewcomer to 8.5s = %d, %v (median %v), %v; want producer 1 at 1.2, median 1.2", p, share, median, ok)
	}
	// Started together: no newcomer.
	if _, _, _, ok := b.worstNewcomer([]time.Duration{0, 0, 0}, 10*time.Second); ok {
		t.Errorf("worstNewcomer of producers started together: ok; want none")
	}
}

// TestNewcomerReach: producer 1 stores nothing for 2.5 s after its start,
// then 10 a bin as producer 0 does; with producer 2 at 2 a bin, its share
// of the second ending 3 s after its start is 50 of a mean of (100 + 50 +
// 20) / 3, 0.88, and of the one ending a bin sooner 0.75. Producer 2
// never reaches 0.8; producer 3's fifth second ends after the run and is
// not counted.
func TestNewcomerReach(t *testing.T) {
	starts := []time.Duration{0, time.Second, 2 * time.Second, 6 * time.Second}
	b := binsOf(4, 10*time.Second, func(p int, t time.Duration) int64 {
		switch {
		case t < starts[p]:
			return 0
		case p == 1 && t < starts[p]+2500*time.Millisecond:
			return 0
		case p == 2:
			return 2
		}
		return 10
	})
	reached, of, slowest := b.newcomerReach(starts, 10*time.Second)
	assert.Equal(t, 1, reached, "newcomers reaching 0.8")
	assert.Equal(t, 2, of, "newcomers whose 5 s end by the run's end")
	assert.Equal(t, 3*time.Second, slowest, "time to reach")
}

// TestSecondShares: producers that store 10 and 30 a bin have shares 0.5
// and 1.5 in every second, and a second in which nobody stored has none.
func TestSecondShares(t *testing.T) {
	b := binsOf(2, 4*time.Second, func(p int, t time.Duration) int64 {
		if t >= 3*time.Second {
			return 0
		}
		return int64(10 + 20*p)
	})
	v := b.secondShares(0, 4*time.Second)
	if len(v) != 6 {
		t.Fatalf("secondShares = %v; want 6 shares (2 producers, 3 seconds with stores)", v)
	}
	for _, x := range v {
		if !near(x, 0.5) && !near(x, 1.5) {
			t.Errorf("secondShares = %v; want 0.5 and 1.5 only", v)
		}
	}
	if q := quantile(v, 0.1); !near(q, 0.5) {
		t.Errorf("quantile(%v, 0.1) = %v; want 0.5", v, q)
	}
	if q := quantile(v, 0.9); !near(q, 1.5) {
		t.Errorf("quantile(%v, 0.9) = %v; want 1.5", v, q)
	}
}

func TestFairness(t *testing.T) {
	b := binsOf(2, 10*time.Second, func(p int, t time.Duration) int64 { return int64(10 + 20*p) })
	j, from, ok := b.fairness([]time.Duration{0, 0}, 10*time.Second)
	if !ok || from != 5*time.Second || !near(j, 0.8) { // 10 and 30 a bin
		t.Errorf("fairness = %v from %v, %v; want 0.8 from 5s", j, from, ok)
	}
	if _, from, ok := b.fairness([]time.Duration{0, 2 * time.Second}, 7*time.Second); ok || from != 7*time.Second {
		t.Errorf("fairness to 7s with the last start at 2s = from %v, %v; want none (from 7s)", from, ok)
	}
}

// TestFleetFigures: two producers that each store half of a capacity of
// 1000/s, then 500/s from 3 s, have every share at 1.
func TestFleetFigures(t *testing.T) {
	f := DefaultFleet()
	f.Producers, f.Duration, f.Rate = 2, 6*time.Second, 1000
	f.Steps = []RateStep{{3 * time.Second, 500}}
	b := binsOf(2, f.Duration, func(p int, t time.Duration) int64 {
		if t < 3*time.Second {
			return 50
		}
		return 25
	})
	var r FleetResult
	f.figures(&r, b)
	if !near(r.CapacityRatio, 1) || !near(r.SettledRatio, 1) || !near(r.StoredPerSecond, 4500/6.0) || r.WindowSeconds != 6 {
		t.Errorf("figures = %.3f of capacity, %.3f settled, %.1f/s over %vs; want 1, 1, 750/s over 6s", r.CapacityRatio, r.SettledRatio, r.StoredPerSecond, r.WindowSeconds)
	}
	want := []FleetPhase{{Rate: 1000, FromSeconds: 2, Seconds: 1, Ratio: 1}, {Rate: 500, FromSeconds: 4, Seconds: 2, Ratio: 1}}
	if len(r.Phases) != 2 {
		t.Fatalf("phases = %+v; want %+v", r.Phases, want)
	}
	for k := range want {
		if g := r.Phases[k]; g.Rate != want[k].Rate || !near(g.FromSeconds, want[k].FromSeconds) || !near(g.Seconds, want[k].Seconds) || !near(g.Ratio, 1) {
			t.Errorf("phase %d = %+v; want %+v", k, g, want[k])
		}
	}
	if !near(r.Jain, 1) || r.JainFromSeconds != 5 || r.Newcomer != nil {
		t.Errorf("Jain %v from %vs, newcomer %v; want 1 from 5s and no newcomer", r.Jain, r.JainFromSeconds, r.Newcomer)
	}
}

func TestFleetValidate(t *testing.T) {
	ok := DefaultFleet()
	ok.Server, ok.Producer = []string{"x"}, []string{"y"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(defaults) = %v; want nil", err)
	}
	for flag, mut := range map[string]func(*Fleet){
		"--producers": func(f *Fleet) { f.Producers = 0 },
		"--senders":   func(f *Fleet) { f.Senders = 0 },
		"--apart":     func(f *Fleet) { f.Apart = 3 * time.Second }, // 7 x 3 s >= 20 s
		"--duration":  func(f *Fleet) { f.Duration = 0 },
		"--rate":      func(f *Fleet) { f.Rate = 0 },
		"--burst":     func(f *Fleet) { f.Burst = 0 },
		"--steps":     func(f *Fleet) { f.Steps = []RateStep{{time.Second, 0}} },
	} {
		f := ok
		mut(&f)
		if err := f.Validate(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("Validate with a bad %s = %v; want an error naming it", flag, err)
		}
	}
	f := ok
	f.Hog = true
	if err := f.Validate(); err == nil {
		t.Errorf("Validate with Hog and no HogCommand = nil; want an error")
	}
}

// TestRateSchedule: the rate of a step applies from its time, however
// late the first request after it comes, and the zero moves only before.
func TestRateSchedule(t *testing.T) {
	zero := time.Unix(1000, 0)
	lim := rate.NewLimiter(10, 10000)
	lim.AllowN(zero, 10000) // empty
	s := newRateSchedule([]RateStep{{time.Second, 1000}}, zero.Add(-time.Hour))
	s.setZero(zero)
	s.apply(lim, zero.Add(500*time.Millisecond))
	if lim.Limit() != 10 {
		t.Fatalf("limit at 0.5s = %v; want 10 (the step is at 1s)", lim.Limit())
	}
	s.apply(lim, zero.Add(2*time.Second))
	if lim.Limit() != 1000 {
		t.Fatalf("limit at 2s = %v; want 1000", lim.Limit())
	}
	// 1 s at 10/s, then 1 s at 1000/s.
	if got := lim.TokensAt(zero.Add(2 * time.Second)); !near(got, 1010) {
		t.Errorf("tokens at 2s = %v; want 1010", got)
	}
	s.setZero(zero.Add(time.Hour))
	if s.zero != zero {
		t.Errorf("setZero after a step moved the zero to %v", s.zero)
	}
}

func TestServeStepsNeedsBucket(t *testing.T) {
	err := ServeSteps(context.Background(), "127.0.0.1:0", ShapeQueue, 10, 1, []RateStep{{time.Second, 5}}, 0, strings.NewReader(""), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--steps") {
		t.Errorf("ServeSteps(queue, steps) = %v; want an error naming --steps", err)
	}
}

// TestFleetProducer runs the server and one producer in this process on
// pipes: 2 raw senders for 300 ms on a bucket of 1000/s that drops to
// 100/s at 100 ms. The producer's stored sends in its bins are the
// server's, its sends are its stores and failures, and the step took.
func TestFleetProducer(t *testing.T) {
	srvIn, srvInW := io.Pipe()
	srvOutR, srvOut := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- ServeSteps(context.Background(), "127.0.0.1:0", ShapeBucket, 1000, 10, []RateStep{{100 * time.Millisecond, 100}}, 0, srvIn, srvOut)
		srvOut.Close()
	}()
	srvLines := bufio.NewReader(srvOutR)
	line, _ := srvLines.ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if !ok {
		t.Fatalf("server's first line = %q; want \"listening ADDR\"", line)
	}

	pIn, pInW := io.Pipe()
	pOutR, pOut := io.Pipe()
	p := FleetProducer{Addr: addr, Contender: Raw, Senders: 2, Duration: 300 * time.Millisecond, MaxAttempts: 1,
		SendTimeout: time.Second, BodyBytes: 100, Bin: 100 * time.Millisecond}
	pdone := make(chan error, 1)
	go func() {
		pdone <- ServeFleetProducer(context.Background(), p, pIn, pOut)
		pOut.Close()
	}()
	pLines := bufio.NewReader(pOutR)
	if line, _ := pLines.ReadString('\n'); line != "ready\n" {
		t.Fatalf("producer's first line = %q; want \"ready\"", line)
	}
	start := "start " + strconv.FormatInt(time.Now().Add(50*time.Millisecond).UnixNano(), 10) + "\n"
	io.WriteString(srvInW, start)
	io.WriteString(pInW, start)
	line, err := pLines.ReadString('\n')
	var res FleetProducerResult
	if err != nil || json.Unmarshal([]byte(line), &res) != nil {
		t.Fatalf("producer's result = %q, %v; want a JSON line", line, err)
	}
	if err := <-pdone; err != nil {
		t.Fatalf("ServeFleetProducer = %v", err)
	}
	pInW.Close()

	io.WriteString(srvInW, "stats\n")
	line, _ = srvLines.ReadString('\n')
	var st ServerStats
	if err := json.Unmarshal([]byte(line), &st); err != nil {
		t.Fatalf("stats = %q: %v", line, err)
	}
	srvInW.Close()
	go io.Copy(io.Discard, srvLines)
	if err := <-done; err != nil {
		t.Errorf("ServeSteps = %v", err)
	}

	var binned int64
	for _, n := range res.Bins {
		binned += n
	}
	if len(res.Bins) != 3 || res.BinMs != 100 {
		t.Errorf("bins = %v of %v ms; want 3 of 100 ms", res.Bins, res.BinMs)
	}
	if res.Sent != res.Stored+res.Failed || res.Stored != st.Stored || binned > res.Stored || binned == 0 {
		t.Errorf("sent %d, stored %d, failed %d, binned %d; server stored %d: want sent = stored + failed, stored = the server's, 0 < binned <= stored",
			res.Sent, res.Stored, res.Failed, binned, st.Stored)
	}
	// At most the burst, 100 ms at 1000/s and 200 ms at 100/s, and a
	// little for the timing of the start.
	if most := int64(10 + 100 + 20 + 15); st.Stored > most {
		t.Errorf("server stored %d in 300 ms; want at most %d (the step to 100/s at 100 ms)", st.Stored, most)
	}
}
