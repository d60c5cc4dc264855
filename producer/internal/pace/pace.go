// Package pace is the producer's pacer: while a broker throttles without
// saying when to come back, the attempts to the throttled scope wait their
// turn at a rate that follows what the broker accepts (pacer.go; the model
// and its measures are in docs/pacing.md). A [Pacers] per endpoint holds
// the endpoint's pacer and one per topic; an attempt waits with
// [Pace.Wait] and reports with [Pace.Record]. A refusal is its topic's,
// unless it names a state of the whole broker ([ThrottledWide]): then the
// endpoint is paced, and every topic's attempts wait for it first.
package pace

import (
	"context"
	"sync"
	"time"

	"github.com/rocketry-go/rocketry/producer/internal/clock"
)

// Result is what the broker made of an attempt, as the pacer counts it.
type Result int

const (
	Other         Result = iota // any other outcome (a failure, a rejection): not counted
	Stored                      // the broker stored the message
	Throttled                   // refused without a hint, for the topic's state (a send rate, a backlog)
	ThrottledWide               // refused without a hint, for a state of the whole broker process: the endpoint is paced
	Hinted                      // refused with a hint of when to come back (google.rpc.RetryInfo), which each send follows: an episode ends
)

// Pace is the pacers an attempt goes through: its endpoint's and its
// topic's there. Either may be nil (pacing off, or no topic known); the
// zero Pace paces nothing.
type Pace struct {
	Endpoint, Topic *Pacer
}

// Wait waits the attempt's turn on clk (nil: the wall clock) at the
// endpoint's pacer, then at the topic's: false when the turn does not fit
// before ctx's deadline (late) or ctx ended during the wait. A pacer with
// no episode open costs one atomic load.
func (pc Pace) Wait(ctx context.Context, clk clock.Clock) (ok bool, late bool) {
	if ok, late := pc.Endpoint.wait(ctx, clk); !ok {
		return ok, late
	}
	return pc.Topic.wait(ctx, clk)
}

// Record counts the result of an attempt that started at start and ended
// at end in the scope it belongs to.
func (pc Pace) Record(r Result, start, end time.Time) {
	switch r {
	case Stored:
		pc.Endpoint.stored(start, end)
		pc.Topic.stored(start, end)
	case Hinted:
		pc.Endpoint.hinted()
		pc.Topic.hinted()
	case Throttled, ThrottledWide:
		if pc.Topic == nil || r == ThrottledWide {
			pc.Endpoint.throttled(start, end)
		} else {
			pc.Topic.throttled(start, end)
		}
	}
}

// Pacers is the throttle state of one endpoint: its own pacer, and one per
// topic, made on first use. Its zero value is ready; it is safe for
// concurrent use, and must not be copied.
type Pacers struct {
	ep     Pacer
	topics sync.Map // topic -> *Pacer
}

// Of returns the pace of an attempt to topic ("": the endpoint's alone).
// It is on every attempt's path: a sync.Map read, no lock.
func (ps *Pacers) Of(topic string) Pace {
	if topic == "" {
		return Pace{Endpoint: &ps.ep}
	}
	p, ok := ps.topics.Load(topic)
	if !ok {
		p, _ = ps.topics.LoadOrStore(topic, new(Pacer))
	}
	return Pace{Endpoint: &ps.ep, Topic: p.(*Pacer)}
}

// Forget drops topic's pacer, as for a topic idle long enough that its
// throttle state says nothing of now; a later Of makes a new one. An
// attempt that holds the old pacer's Pace keeps using it.
func (ps *Pacers) Forget(topic string) { ps.topics.Delete(topic) }
