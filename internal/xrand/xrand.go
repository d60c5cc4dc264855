// Package xrand holds the project's seeded, concurrency-safe random source:
// the test broker's faults, the demo, the benchmarks and the chaos suite
// share it so that one seed gives one run. It is internal: users pass any
// backoff.Rand, and the producer's default is math/rand/v2's top-level
// generator.
package xrand

import (
	"math/rand/v2"
	"sync"
)

// Locked is a math/rand/v2 PCG generator behind a mutex: a backoff.Rand
// that concurrent sends can share. The same seeds give the same numbers.
type Locked struct {
	mu sync.Mutex
	r  *rand.Rand
}

// New returns a Locked seeded with the PCG seeds seed1 and seed2.
func New(seed1, seed2 uint64) *Locked {
	return &Locked{r: rand.New(rand.NewPCG(seed1, seed2))}
}

// Float64 returns a uniform number in [0, 1).
func (l *Locked) Float64() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}
