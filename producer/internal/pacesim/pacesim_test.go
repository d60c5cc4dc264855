package pacesim

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// This file asserts the pacer's targets on the simulation (docs/pacing.md
// has the table). Every run is deterministic: a threshold here is a figure
// of the seed it names, with a margin for the arithmetic of another
// platform, never lowered after a flaky run.

// TestSimDeterministic: the same scenario gives the same trace, on a
// fleet with a busy machine, stalls and a queue, where goroutines race
// most.
func TestSimDeterministic(t *testing.T) {
	t.Parallel()
	sc := Scenario{
		Seed: 7, Duration: 3 * time.Second,
		Broker: Broker{RTT: time.Millisecond, Default: &Bucket{Rate: 1000, Burst: 20}, Queue: 1500, StallEvery: 300 * time.Millisecond, Stall: 5 * time.Millisecond},
		Producers: []Producer{
			{Senders: 16, Busy: 200 * time.Microsecond},
			{Senders: 16, Start: 500 * time.Millisecond},
		},
	}
	a, b := Run(sc), Run(sc)
	require.Positive(t, a.Stored)
	assert.Equal(t, a.Trace(), b.Trace(), "the same seed, another trace: %v / %v", a, b)
	sc.Seed = 8
	assert.NotEqual(t, a.Trace(), Run(sc).Trace(), "another seed, the same trace")
}

// want is what a shape must reach: the share of the capacity after the
// first instant (every sender in flight when the bucket first runs dry is
// refused and sleeps out its second, whatever the pacer), attempts per
// stored message, and the share of attempts refused.
type want struct {
	settled   float64
	perStored float64
	refused   float64
}

// TestSimShapes runs the shapes of docs/pacing.md's table, 10 virtual
// seconds each.
func TestSimShapes(t *testing.T) {
	t.Parallel()
	shapes := Shapes(10 * time.Second)
	for _, tc := range []struct {
		shape string
		want  want
	}{
		{"bucket-64", want{0.97, 1.05, 0.01}},
		{"bucket-256-b50", want{0.97, 1.05, 0.01}},
		{"bucket-64-b10", want{0.97, 1.05, 0.01}},
		{"bucket-500-b20", want{0.97, 1.05, 0.02}},
		{"queue-200", want{0.97, 1.05, 0.02}},
		{"queue-2000", want{0.97, 1.05, 0.01}},
		{"rtt-25ms", want{0.97, 1.05, 0.01}},
		{"busy-64", want{0.97, 1.05, 0.01}},
		{"busy-b10", want{0.96, 1.05, 0.01}},
		{"moving", want{0.93, 1.05, 0.01}}, // the steps in it; TestSimMovingCapacity has each phase
		{"fleet-8x8", want{0.95, 1.05, 0.03}},
		{"stall-b10", want{0.92, 1.05, 0.01}},
		{"bucket-4", want{0.80, 1.05, 0.01}},
	} {
		t.Run(tc.shape, func(t *testing.T) {
			t.Parallel()
			if raceEnabled && !raceShapes[tc.shape] {
				t.Skip("the race detector runs " + fmt.Sprint(raceShapes) + "; the figures are the same without it")
			}
			sc := shapes[tc.shape]
			sc.Seed = 1
			r := Run(sc)
			assert.Zero(t, r.Failed, "%v", r)
			assert.GreaterOrEqual(t, r.Settled(), tc.want.settled, "settled share: %v", r)
			assert.LessOrEqual(t, r.PerStored(), tc.want.perStored, "attempts per stored: %v", r)
			assert.LessOrEqual(t, float64(r.Refused)/float64(r.Attempts), tc.want.refused, "refused: %v", r)
		})
	}
}

// raceShapes are the shapes run under the race detector: a bucket, a
// queue, a busy machine with stalls between them cover every path.
var raceShapes = map[string]bool{"bucket-64-b10": true, "queue-200": true, "busy-b10": true}

// TestSimPacingOff: the same shapes without pacing, the baseline the
// pacer is for: senders refused together sleep out their second together.
func TestSimPacingOff(t *testing.T) {
	t.Parallel()
	skipRace(t)
	shapes := Shapes(10 * time.Second)
	for _, name := range []string{"bucket-64", "bucket-4", "bucket-64-b10"} {
		sc := shapes[name]
		sc.Seed = 1
		on, off := Run(sc), Run(sc.WithoutPacing())
		assert.Greater(t, on.Settled(), 3*off.Settled(), "%s: pacing on %v; off %v", name, on, off)
	}
}

// TestSimMovingCapacity: capacity 2,000 -> 500 -> 3,000/s, 10 s each: each
// phase at 95% or more from 1 s after its step.
func TestSimMovingCapacity(t *testing.T) {
	t.Parallel()
	skipRace(t)
	sc := Shapes(30 * time.Second)["moving"]
	sc.Seed = 1
	r := Run(sc)
	for _, ph := range []struct{ from, to time.Duration }{{2 * time.Second, 10 * time.Second}, {11 * time.Second, 20 * time.Second}, {21 * time.Second, 30 * time.Second}} {
		assert.GreaterOrEqual(t, r.Share(ph.from, ph.to), 0.95, "%v-%v: %.3f (%v)", ph.from, ph.to, r.Share(ph.from, ph.to), r)
	}
	assert.Zero(t, r.Failed)
}

// TestSimHotBesideCold: a topic throttled at 500/s beside an open one, one
// producer, half its senders on each: the open topic keeps its throughput
// alone, and the throttled one is paced to its capacity.
func TestSimHotBesideCold(t *testing.T) {
	t.Parallel()
	skipRace(t)
	sc := Shapes(10 * time.Second)["hot-cold"]
	sc.Seed = 1
	both := Run(sc)
	sc.Producers[0].Topics = []string{"cold"}
	sc.Producers[0].Senders /= 2
	alone := Run(sc)
	require.Positive(t, alone.Topics["cold"])
	assert.GreaterOrEqual(t, float64(both.Topics["cold"]), 0.95*float64(alone.Topics["cold"]), "cold beside hot %d, alone %d", both.Topics["cold"], alone.Topics["cold"])
	hot := float64(both.Topics["hot"]) / (500 * 10)
	assert.GreaterOrEqual(t, hot, 0.95, "the hot topic at %.3f of its capacity", hot)
}

// TestSimOneInTen: one message in ten refused once, for its own reasons,
// whatever the rate: the pacer changes nothing (no episode, or one that
// ends): each message waits its own schedule, as with pacing off.
func TestSimOneInTen(t *testing.T) {
	t.Parallel()
	skipRace(t)
	sc := Shapes(10 * time.Second)["oneinten"]
	sc.Seed = 1
	on, off := Run(sc), Run(sc.WithoutPacing())
	assert.GreaterOrEqual(t, float64(on.Stored), 0.95*float64(off.Stored), "pacing on %v; off %v", on, off)
	// Every seed of ten over 20 s: a cut's spiral at a low rate shows on
	// some seeds only (seeds 6-10 stored 0.13-0.51 of pacing off before
	// the dips were pooled across cuts).
	for seed := range uint64(10) {
		sc := Shapes(20 * time.Second)["oneinten"]
		sc.Seed = seed + 1
		on, off := Run(sc), Run(sc.WithoutPacing())
		assert.GreaterOrEqual(t, float64(on.Stored), 0.9*float64(off.Stored), "seed %d: pacing on %v; off %v", sc.Seed, on, off)
	}
}

// TestSimFleet: 8 producers of 8 senders on one bucket, started together
// or 2 s apart, store the capacity, and their shares stay within Jain's
// index 0.9 (seed 1: 0.942 together over 10 s, 0.953 apart from 5 s after
// the last start; docs/pacing.md: the target is 0.95, met on average, not
// on every seed: with every producer's climb in proportion to its own
// rate, only the refusals, which fall on the larger ones more often, draw
// the shares together). Started apart, 5 newcomers of 7 or more reach 0.8
// of a fair share in a second within 5 s of their start (seed 1: 6; the
// target is every newcomer, met on 7 of seeds 1-20).
func TestSimFleet(t *testing.T) {
	t.Parallel()
	skipRace(t)
	for _, name := range []string{"fleet-8x8", "fleet-8x8-apart"} {
		sc := Shapes(10 * time.Second)[name]
		sc.Seed = 1
		r := Run(sc)
		from := max(2*time.Second, sc.Producers[len(sc.Producers)-1].Start+5*time.Second)
		assert.GreaterOrEqual(t, r.Jain(from, sc.Duration), 0.9, "%s: %v", name, r)
		assert.GreaterOrEqual(t, r.Settled(), 0.95, "%s: %v", name, r)
		assert.Zero(t, r.Failed, "%s: %v", name, r)
		if name == "fleet-8x8-apart" {
			reached := 0
			for i, p := range sc.Producers {
				if p.Start > 0 && r.Reaches(i, p.Start, 5*time.Second, 0.8) {
					reached++
				}
			}
			assert.GreaterOrEqual(t, reached, 5, "%s: newcomers at 0.8 of a fair share within 5 s, of 7: %v", name, r)
		}
	}
}

func skipRace(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector runs TestSimShapes' race shapes; the figures are the same without it")
	}
}
