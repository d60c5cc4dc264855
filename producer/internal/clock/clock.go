// Package clock is the time of a send: when it is, and how a send waits.
// The executor and the pacer take it from their config, so that a
// simulation can run them on a virtual clock (one goroutine at a time,
// every wait an event) and get the same trace from the same seed.
package clock

import (
	"context"
	"time"
)

// Clock tells the time and waits. Implementations are safe for concurrent
// use.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// Sleep waits d; false when ctx ended first. A d of zero or less
	// returns true at once.
	Sleep(ctx context.Context, d time.Duration) bool
}

// Real is the wall clock.
var Real Clock = wall{}

type wall struct{}

func (wall) Now() time.Time { return time.Now() }

func (wall) Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Or is c, or Real when c is nil.
func Or(c Clock) Clock {
	if c == nil {
		return Real
	}
	return c
}
