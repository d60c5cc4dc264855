package pacesim

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// TestExplore prints the shapes' figures (PACESIM_EXPLORE=1).
func TestExplore(t *testing.T) {
	if os.Getenv("PACESIM_EXPLORE") == "" {
		t.Skip("PACESIM_EXPLORE not set")
	}
	for name, sc := range Shapes(time.Duration(envInt("PACESIM_SECONDS", 20)) * time.Second) {
		if f := os.Getenv("PACESIM_ONLY"); f != "" && f != name {
			continue
		}
		for seed := range uint64(envInt("PACESIM_SEEDS", 1)) {
			sc.Seed = seed + 1
			start := time.Now()
			r := Run(sc)
			last := sc.Producers[len(sc.Producers)-1].Start
			newc := 10.0
			for i, p := range sc.Producers {
				if p.Start > 0 {
					newc = min(newc, r.FairShare(i, p.Start+4*time.Second, p.Start+5*time.Second))
				}
			}
			t.Logf("%-16s seed %d: %v  [jain %.3f newcomer %.2f] (%v)", name, sc.Seed, r, r.Jain(max(sc.Settle, last+5*time.Second), sc.Duration), newc, time.Since(start).Round(time.Millisecond))
		}
	}
}

// TestExploreTrace prints one shape's stores per 100 ms (PACESIM_TRACE=name).
func TestExploreTrace(t *testing.T) {
	name := os.Getenv("PACESIM_TRACE")
	if name == "" {
		t.Skip("PACESIM_TRACE not set")
	}
	sc := Shapes(time.Duration(envInt("PACESIM_SECONDS", 10)) * time.Second)[name]
	sc.Seed = uint64(envInt("PACESIM_SEED", 1))
	r := Run(sc)
	for i := range r.Bins[0] {
		line := ""
		for p := range r.Bins {
			line += " " + strconv.FormatInt(r.Bins[p][i], 10)
		}
		t.Logf("%5.1fs%s  refused %d", float64(i)*Bin.Seconds(), line, r.RefusedBins[i])
	}
	t.Log(r)
}
