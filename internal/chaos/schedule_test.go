package chaos_test

import (
	"math/rand/v2"
	"time"

	"github.com/rocketry-go/rocketry/broker"
)

// faultKind is one kind of step of the chaos schedule.
type faultKind int

const (
	fRestart      faultKind = iota // broker.Restart
	fDrop                          // broker.DropConnections
	fInternal                      // Faults.InternalRate
	fBlackhole                     // Faults.BlackholeRate: attempt timeouts
	fLatency                       // Faults.Latency spike, around the attempt timeout
	fBacklogStorm                  // MaxBacklog + the draining consumer paused
	fStorageStorm                  // MaxStorageLoad + a consumer group reset to 0
	fUnavailable                   // Faults.Unavailable: 503 on every send
	fHold                          // the broker's answers held in its proxy (stored, answer late): proxied scenarios only
	fCalm                          // no fault, no throttle
	numFaultKinds
)

var faultNames = [numFaultKinds]string{
	fRestart: "restart", fDrop: "drop", fInternal: "internal", fBlackhole: "blackhole",
	fLatency: "latency", fBacklogStorm: "backlog_storm", fStorageStorm: "storage_storm",
	fUnavailable: "unavailable", fHold: "hold", fCalm: "calm",
}

// allFaults is every kind of step but fHold, which needs proxies.
var allFaults = []faultKind{fRestart, fDrop, fInternal, fBlackhole, fLatency, fBacklogStorm, fStorageStorm, fUnavailable, fCalm}

// chaos runs the seeded schedule on the live brokers, one step per tick,
// until stop closes; it counts the steps into o.
func chaos(sc scenario, lbs []*liveBroker, stop <-chan struct{}, o *outcome) {
	rng := rand.New(rand.NewPCG(sc.seed, 0xc4a05))
	tk := time.NewTicker(sc.tick)
	defer tk.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tk.C:
		}
		for _, lb := range lbs {
			if lb.px != nil && !lb.heldUntil.IsZero() && time.Now().After(lb.heldUntil) {
				lb.px.held.Store(false)
				lb.heldUntil = time.Time{}
			}
		}
		k := sc.kinds[rng.IntN(len(sc.kinds))]
		lb := lbs[rng.IntN(len(lbs))]
		x := rng.Float64()
		o.steps[k]++
		switch k {
		case fRestart:
			if err := lb.b.Restart(); err != nil {
				o.restartErrs++
				if len(o.restartErrTexts) < 3 {
					o.restartErrTexts = append(o.restartErrTexts, err.Error())
				}
			}
		case fDrop:
			lb.b.DropConnections()
		case fInternal:
			lb.b.SetFaults(broker.Faults{InternalRate: 0.1 + 0.4*x})
		case fBlackhole:
			lb.b.SetFaults(broker.Faults{BlackholeRate: 0.05 + 0.25*x})
		case fLatency:
			// From a quarter of the attempt timeout to 1.5 times it: some
			// answers come just before the attempt gives up, some after.
			lb.b.SetFaults(broker.Faults{Latency: sc.attemptTimeout/4 + time.Duration(x*float64(sc.attemptTimeout)*5/4)})
		case fBacklogStorm:
			lb.b.SetThrottle(broker.Throttle{MaxBacklog: 20 + int64(x*80)})
			lb.pausedUntil.Store(time.Now().Add(sc.tick * time.Duration(1+rng.IntN(3))).UnixNano())
		case fStorageStorm:
			lb.b.SetThrottle(broker.Throttle{MaxStorageLoad: 50, ColdReadDistance: 20, StorageLoadWindow: 50 * time.Millisecond})
			select {
			case lb.reset <- struct{}{}:
			default:
			}
		case fUnavailable:
			lb.b.SetFaults(broker.Faults{Unavailable: true})
		case fHold:
			// For 10 to 40 ticks: long enough, often, for a send pinned
			// there to spend its attempts.
			if lb.px != nil {
				lb.px.held.Store(true)
				lb.heldUntil = time.Now().Add(sc.tick * time.Duration(10+rng.IntN(30)))
			}
		case fCalm:
			lb.b.SetFaults(broker.Faults{})
			lb.b.SetThrottle(broker.Throttle{})
		}
	}
}
