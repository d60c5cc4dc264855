package pacesim

import (
	"fmt"
	"os"
	"strconv"
	"strings"
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

// TestExploreSweep prints, per shape, the worst settled share, attempts per
// stored, refused share and newcomer figure over PACESIM_SEEDS seeds.
func TestExploreSweep(t *testing.T) {
	if os.Getenv("PACESIM_SWEEP") == "" {
		t.Skip("PACESIM_SWEEP not set")
	}
	names := strings.Split(os.Getenv("PACESIM_SWEEP"), ",")
	out := ""
	for _, name := range names {
		sc := Shapes(time.Duration(envInt("PACESIM_SECONDS", 10)) * time.Second)[name]
		worst, whole, refused, newc, jain := 10.0, 10.0, 0.0, 10.0, 10.0
		for seed := range uint64(envInt("PACESIM_SEEDS", 3)) {
			sc.Seed = seed + 1
			r := Run(sc)
			worst = min(worst, r.Settled())
			whole = min(whole, r.Ratio())
			refused = max(refused, float64(r.Refused)/float64(r.Attempts))
			last := sc.Producers[len(sc.Producers)-1].Start
			jain = min(jain, r.Jain(max(sc.Settle, last+5*time.Second), sc.Duration))
			for i, p := range sc.Producers {
				if p.Start > 0 {
					newc = min(newc, r.FairShare(i, p.Start+4*time.Second, p.Start+5*time.Second))
				}
			}
		}
		out += fmt.Sprintf("%s: %.1f/%.1f ref%.2f%%", name, 100*worst, 100*whole, 100*refused)
		if newc < 10 {
			out += fmt.Sprintf(" new%.2f j%.3f", newc, jain)
		}
		out += " | "
	}
	fmt.Println(out)
}

func TestExploreNewcomers(t *testing.T) {
	if os.Getenv("PACESIM_NEW") == "" {
		t.Skip()
	}
	sc := Shapes(24 * time.Second)["fleet-8x8-apart"]
	for seed := range uint64(3) {
		sc.Seed = seed + 1
		r := Run(sc)
		line := ""
		for i, p := range sc.Producers {
			if p.Start > 0 {
				line += fmt.Sprintf(" [%.2f %.2f %.2f]", r.FairShare(i, p.Start+2*time.Second, p.Start+3*time.Second), r.FairShare(i, p.Start+3*time.Second, p.Start+4*time.Second), r.FairShare(i, p.Start+4*time.Second, p.Start+5*time.Second))
			}
		}
		fmt.Println(line)
	}
}

func TestExploreOff(t *testing.T) {
	if os.Getenv("PACESIM_OFF") == "" {
		t.Skip()
	}
	for _, name := range strings.Split(os.Getenv("PACESIM_OFF"), ",") {
		sc := Shapes(10 * time.Second)[name]
		sc.Seed = 1
		on := Run(sc)
		for i := range sc.Producers {
			sc.Producers[i].NoPacing = true
		}
		off := Run(sc)
		fmt.Printf("%-16s on: %v\n%-16s off: %v\n", name, on, "", off)
	}
}
