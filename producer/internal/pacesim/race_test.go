//go:build race

package pacesim

// raceEnabled: the race detector slows the simulation some 8 times. Its
// figures are the same with it or without (the trace is deterministic),
// so under it the shape tables run a few shapes that cover the pacer's
// paths, and the rest run without it.
const raceEnabled = true
