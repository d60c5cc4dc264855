package broker

import (
	"fmt"
	"math"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
)

// Faults are failures the broker injects into SendMessage calls on purpose,
// for tests. The zero Faults injects nothing. The rates are shares of calls
// in [0, 1]; one random draw per call picks at most one of blackhole, drop
// and internal, so their sum must not be above 1. Which calls get a fault is
// decided by the broker's random source (see WithSeed), so that it is the
// same for the same sequence of calls.
//
// Faults apply to valid requests only: an invalid request is answered 4xx
// first.
type Faults struct {
	// InternalRate is the share of SendMessage calls answered INTERNAL
	// (500 INTERNAL_ERROR); nothing is stored.
	InternalRate float64
	// Latency is added before answering each SendMessage call; 0 means
	// none.
	Latency time.Duration
	// BlackholeRate is the share of calls never answered until the
	// caller's context ends or the broker stops; nothing is stored.
	BlackholeRate float64
	// DropRate is the share of calls whose client connection is closed
	// instead of answering; nothing is stored.
	DropRate float64
	// Unavailable answers every SendMessage call 503 UNAVAILABLE, as a
	// broker shutting down does.
	Unavailable bool
}

// Validate reports whether f is usable: rates in [0, 1] with a sum of at
// most 1 and no negative latency.
func (f Faults) Validate() error {
	for _, r := range []struct {
		name string
		v    float64
	}{{"InternalRate", f.InternalRate}, {"BlackholeRate", f.BlackholeRate}, {"DropRate", f.DropRate}} {
		if math.IsNaN(r.v) || r.v < 0 || r.v > 1 {
			return fmt.Errorf("%s %v is not in [0, 1]", r.name, r.v)
		}
	}
	if s := f.InternalRate + f.BlackholeRate + f.DropRate; s > 1+1e-9 {
		return fmt.Errorf("InternalRate+BlackholeRate+DropRate = %v is above 1", s)
	}
	if f.Latency < 0 {
		return fmt.Errorf("Latency %v is negative", f.Latency)
	}
	return nil
}

// clamp makes f valid: used by SetFaults, which cannot return an error.
func (f Faults) clamp() Faults {
	c := func(v float64) float64 {
		if math.IsNaN(v) || v < 0 {
			return 0
		}
		return min(v, 1)
	}
	f.InternalRate, f.BlackholeRate, f.DropRate = c(f.InternalRate), c(f.BlackholeRate), c(f.DropRate)
	if s := f.InternalRate + f.BlackholeRate + f.DropRate; s > 1 {
		f.InternalRate, f.BlackholeRate, f.DropRate = f.InternalRate/s, f.BlackholeRate/s, f.DropRate/s
	}
	f.Latency = max(f.Latency, 0)
	return f
}

func (f *Faults) random() bool {
	return f.InternalRate > 0 || f.BlackholeRate > 0 || f.DropRate > 0
}

// faultKind is a kind of injected fault, the key of its count in stats.
type faultKind int

const (
	faultNone faultKind = iota
	faultInternal
	faultLatency
	faultBlackhole
	faultDrop
	faultUnavailable
	numFaultKinds
)

// faultNames are the names of the fault kinds in stats.
var faultNames = [numFaultKinds]string{
	faultInternal:    "internal",
	faultLatency:     "latency",
	faultBlackhole:   "blackhole",
	faultDrop:        "drop",
	faultUnavailable: "unavailable",
}

// pick draws which random fault, if any, a call gets.
func (f *Faults) pick(r *backoff.LockedRand) faultKind {
	if !f.random() {
		return faultNone
	}
	u := r.Float64()
	switch {
	case u < f.BlackholeRate:
		return faultBlackhole
	case u < f.BlackholeRate+f.DropRate:
		return faultDrop
	case u < f.BlackholeRate+f.DropRate+f.InternalRate:
		return faultInternal
	}
	return faultNone
}
