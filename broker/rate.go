package broker

import (
	"sync"
	"time"
)

// event is a count of events (cold reads, consumed messages) at one
// instant.
type event struct {
	at time.Time
	n  int64
}

// rateWindow counts events over a sliding window of time, exactly: it keeps
// one entry per add, dropped once older than the window. Safe for
// concurrent use.
type rateWindow struct {
	mu     sync.Mutex
	events []event
	head   int // events[:head] are dropped
	sum    int64
}

// add records n events at now.
func (w *rateWindow) add(now time.Time, n int64, window time.Duration) {
	if n <= 0 {
		return
	}
	w.mu.Lock()
	w.pruneLocked(now, window)
	w.events = append(w.events, event{now, n})
	w.sum += n
	w.mu.Unlock()
}

// pruneLocked drops the events at or before now-window.
func (w *rateWindow) pruneLocked(now time.Time, window time.Duration) {
	cutoff := now.Add(-window)
	for w.head < len(w.events) && !w.events[w.head].at.After(cutoff) {
		w.sum -= w.events[w.head].n
		w.head++
	}
	if w.head == len(w.events) {
		w.events, w.head = w.events[:0], 0
	} else if w.head > 64 && w.head > len(w.events)/2 {
		w.events = append(w.events[:0], w.events[w.head:]...)
		w.head = 0
	}
}

// rate returns the events per second over the window ending at now, and,
// when the rate is above limit, how long until it falls to limit or under
// with no new events.
func (w *rateWindow) rate(now time.Time, window time.Duration, limit float64) (float64, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pruneLocked(now, window)
	r := float64(w.sum) / window.Seconds()
	if limit <= 0 || r <= limit {
		return r, 0
	}
	allowed := limit * window.Seconds()
	sum := w.sum
	for _, e := range w.events[w.head:] {
		sum -= e.n
		if float64(sum) <= allowed {
			return r, e.at.Add(window).Sub(now)
		}
	}
	return r, window
}

// rateSince is like rate without a limit, over the window ending at now or,
// when since is later than the window's start, over the time since since
// (at least minDrainSpan): a rate measured by a window that started before
// the events could happen is too low.
func (w *rateWindow) rateSince(now time.Time, window time.Duration, since time.Time) float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pruneLocked(now, window)
	span := min(window, max(now.Sub(since), minDrainSpan))
	return float64(w.sum) / span.Seconds()
}
