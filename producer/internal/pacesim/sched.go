// Package pacesim runs the producer's real executor and pacer
// (producer/internal/send, producer/internal/pace) against a model broker
// on a virtual clock: independent producers, each with its own pacers, its
// senders making sync sends as the producer does, a broker with token
// buckets per topic, a send queue that refuses what waited 200 ms, a
// capacity that moves, a round trip, stalls and a busy machine.
//
// The clock is a discrete-event scheduler: exactly one goroutine of the
// simulation runs at a time, and every wait (a turn at the pacer, a retry's
// backoff, a round trip) is an event on the virtual clock, taken in time
// order and, at equal times, in the order it was made. With the randomness
// seeded, the same Scenario gives the same trace on any machine, under the
// race detector or not; a run of 20 virtual seconds takes a fraction of
// a real one.
package pacesim

import (
	"container/heap"
	"context"
	"time"
)

// sched is the virtual clock and the scheduler of the goroutines that use
// it. Only the goroutine that runs (one at a time, handed control by Run)
// reads or writes its state, and control passes over channels, so no lock
// is needed.
type sched struct {
	now    time.Time
	seq    uint64
	events events
	yield  chan struct{} // the running goroutine hands control back
	done   bool          // the run is over: waits return at once, false
}

type event struct {
	at   time.Time
	seq  uint64
	wake chan bool // true: run on; false: the run is over
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if !e[i].at.Equal(e[j].at) {
		return e[i].at.Before(e[j].at)
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

func newSched(start time.Time) *sched {
	return &sched{now: start, yield: make(chan struct{})}
}

// Now is the virtual time.
func (s *sched) Now() time.Time { return s.now }

// Sleep waits d of virtual time; false when the run is over (ctx is not
// read: the simulation cancels no context while it runs).
func (s *sched) Sleep(_ context.Context, d time.Duration) bool {
	if d <= 0 {
		return !s.done
	}
	return s.until(s.now.Add(d))
}

// until blocks the running goroutine until at; false when the run is
// over.
func (s *sched) until(at time.Time) bool {
	if s.done {
		return false
	}
	wake := s.add(at)
	s.yield <- struct{}{}
	return <-wake
}

func (s *sched) add(at time.Time) chan bool {
	if at.Before(s.now) {
		at = s.now
	}
	wake := make(chan bool, 1)
	s.seq++
	heap.Push(&s.events, event{at: at, seq: s.seq, wake: wake})
	return wake
}

// spawn starts f on a goroutine of its own at virtual time at.
func (s *sched) spawn(at time.Time, f func()) {
	wake := s.add(at)
	go func() {
		if <-wake {
			f()
		}
		s.yield <- struct{}{}
	}()
}

// run takes the events in order until the clock would pass end, then ends
// the run: every goroutine still waiting is woken, one at a time, with
// false, and runs to its end.
func (s *sched) run(end time.Time) {
	for s.events.Len() > 0 {
		e := heap.Pop(&s.events).(event)
		if e.at.After(end) {
			heap.Push(&s.events, e)
			break
		}
		s.now = e.at
		e.wake <- true
		<-s.yield
	}
	s.done = true
	for s.events.Len() > 0 {
		e := heap.Pop(&s.events).(event)
		e.wake <- false
		<-s.yield
	}
}
