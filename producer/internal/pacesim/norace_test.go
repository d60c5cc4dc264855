//go:build !race

package pacesim

const raceEnabled = false
