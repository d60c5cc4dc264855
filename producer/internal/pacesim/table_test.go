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
