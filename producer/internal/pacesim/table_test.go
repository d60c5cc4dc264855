package pacesim

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestTable prints docs/pacing.md's table of the simulation: every shape,
// 20 virtual seconds, pacing on and off, over PACESIM_SEEDS seeds (1 by
// default), each figure the worst of the seeds. It runs with
//
//	PACESIM_TABLE=1 go test ./producer/internal/pacesim -run TestTable -v
//
// (PACESIM_SHAPES=a,b: only those; PACESIM_SECONDS=n: another duration).
func TestTable(t *testing.T) {
	if os.Getenv("PACESIM_TABLE") == "" {
		t.Skip("PACESIM_TABLE is not set: this prints a table, it asserts nothing")
	}
	d := time.Duration(envInt("PACESIM_SECONDS", 20)) * time.Second
	shapes := Shapes(d)
	names := make([]string, 0, len(shapes))
	for name := range shapes {
		names = append(names, name)
	}
	slices.Sort(names)
	if only := os.Getenv("PACESIM_SHAPES"); only != "" {
		names = strings.Split(only, ",")
	}
	seeds := envInt("PACESIM_SEEDS", 1)
	fmt.Println("| shape | pacing | settled | whole run | att/stored | refused | p99 | failed | fairness |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, name := range names {
		for _, off := range []bool{false, true} {
			var rs []*Result
			for seed := range seeds {
				sc := shapes[name]
				sc.Seed = uint64(seed + 1)
				if off {
					sc = sc.WithoutPacing()
				}
				rs = append(rs, Run(sc))
			}
			worst := func(f func(*Result) float64, lower bool) float64 {
				v := f(rs[0])
				for _, r := range rs[1:] {
					if x := f(r); (x < v) == lower {
						v = x
					}
				}
				return v
			}
			pacing := "on"
			if off {
				pacing = "off"
			}
			sc := shapes[name]
			fair := ""
			if len(sc.Producers) > 1 {
				last := sc.Producers[len(sc.Producers)-1].Start
				fair = fmt.Sprintf("Jain %.3f", worst(func(r *Result) float64 { return r.Jain(max(sc.Settle, 2*time.Second, last+5*time.Second), sc.Duration) }, true))
				if last > 0 {
					fair += fmt.Sprintf(", newcomer %.2f", worst(func(r *Result) float64 {
						v := 10.0
						for i, p := range sc.Producers {
							if p.Start > 0 {
								v = min(v, r.FairShare(i, p.Start+4*time.Second, p.Start+5*time.Second))
							}
						}
						return v
					}, true))
				}
			}
			settled, whole := "-", "-"
			switch {
			case len(sc.Broker.Topics) > 0:
				// A throttled topic beside an open one: the throttled
				// topic's share of its capacity, and the open one's
				// stores (TestSimHotBesideCold compares them with its
				// stores alone).
				settled = fmt.Sprintf("hot %.1f%%", 100*worst(func(r *Result) float64 { return float64(r.Topics["hot"]) / r.Capacity }, true))
				whole = fmt.Sprintf("cold %d stored", int64(worst(func(r *Result) float64 { return float64(r.Topics["cold"]) }, true)))
			case rs[0].Capacity > 0:
				settled = fmt.Sprintf("%.1f%%", 100*worst((*Result).Settled, true))
				whole = fmt.Sprintf("%.1f%%", 100*worst((*Result).Ratio, true))
			default:
				settled = fmt.Sprintf("%d stored", int64(worst(func(r *Result) float64 { return float64(r.Stored) }, true)))
			}
			fmt.Printf("| %s | %s | %s | %s | %.3f | %.2f%% | %v | %d | %s |\n", name, pacing, settled, whole,
				worst((*Result).PerStored, false),
				100*worst(func(r *Result) float64 { return float64(r.Refused) / float64(r.Attempts) }, false),
				time.Duration(worst(func(r *Result) float64 { return float64(r.P99()) }, false)).Round(time.Millisecond),
				int64(worst(func(r *Result) float64 { return float64(r.Failed) }, false)), fair)
		}
	}
}

// TestShares prints the one-second shares of docs/pacing.md's newcomers
// paragraph: in fleet-8x8-apart over PACESIM_SEEDS seeds (10 by default),
// each newcomer's share of a fair share in its fifth second beside every
// producer's in every second from 5 s after the last start, so that a
// newcomer's share is read against how much any producer's moves from one
// second to the next; and how many newcomers reach 0.8 of a fair share in
// one second (read every 100 ms) within 5 s of their start, beside how
// many 5 s stretches of every producer, from 5 s after the last start,
// hold such a second. It runs with
//
//	PACESIM_SHARES=1 go test ./producer/internal/pacesim -run TestShares -v
func TestShares(t *testing.T) {
	if os.Getenv("PACESIM_SHARES") == "" {
		t.Skip("PACESIM_SHARES is not set: this prints figures, it asserts nothing")
	}
	var newcomers, every []float64
	var reach [2]struct{ n, reached int }
	count := func(k int, ok bool) {
		reach[k].n++
		if ok {
			reach[k].reached++
		}
	}
	for seed := range envInt("PACESIM_SEEDS", 10) {
		sc := Shapes(30 * time.Second)["fleet-8x8-apart"]
		sc.Seed = uint64(seed + 1)
		r := Run(sc)
		last := sc.Producers[len(sc.Producers)-1].Start
		for i, p := range sc.Producers {
			if p.Start > 0 {
				newcomers = append(newcomers, r.FairShare(i, p.Start+4*time.Second, p.Start+5*time.Second))
				count(0, r.Reaches(i, p.Start, 5*time.Second, 0.8))
			}
			for from := last + 5*time.Second; from+time.Second <= sc.Duration; from += time.Second {
				every = append(every, r.FairShare(i, from, from+time.Second))
				if from+5*time.Second <= sc.Duration {
					count(1, r.Reaches(i, from, 5*time.Second, 0.8))
				}
			}
		}
	}
	fmt.Println("| one-second shares of a fair share | n | least | 5th pct | 10th | 25th | median |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, row := range []struct {
		name string
		v    []float64
	}{{"a newcomer's fifth second", newcomers}, {"every producer's every second, from 5 s after the last start", every}} {
		v := row.v
		slices.Sort(v)
		fmt.Printf("| %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f |\n", row.name, len(v), v[0], v[len(v)/20], v[len(v)/10], v[len(v)/4], v[len(v)/2])
	}
	fmt.Printf("\nnewcomers at 0.8 of a fair share in one second within 5 s of their start: %d of %d\n", reach[0].reached, reach[0].n)
	fmt.Printf("5 s stretches of every producer, from 5 s after the last start, holding such a second: %d of %d\n", reach[1].reached, reach[1].n)
}
