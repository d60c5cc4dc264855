// Package pace is the producer's pacer: the throttle state of what a broker
// throttles without saying when to come back, by which the attempts to a
// throttled scope wait their turn at a rate that follows what the broker
// accepts (pacer.go states the controller; docs/pacing.md has the model
// and its measures), instead of each waiting out its own throttle
// schedule alone.
//
// The producer holds a [Pacers] per endpoint; an attempt's [Pace] is its
// endpoint's and its topic's pacer there. The attempt waits its turn with
// [Pace.Wait] and reports what the broker made of it with [Pace.Record],
// as a [Result]: whether a refusal names the whole broker's state is read
// by the caller from its protocol's words, so that this package knows no
// protocol.
package pace

import (
	"context"
	"sync"
	"time"

	"github.com/rocketry-go/rocketry/producer/internal/clock"
)

// This file says which pacer a throttle belongs to: the scope of what the
// broker throttles.
//
// A backlog is per topic (the bundled broker's, and RocketMQ's "too many
// unconsumed messages"), and a send rate is paced per topic too: a limit of
// the whole endpoint is still followed by the pacers of its topics, each
// cutting from what its own topic gets through (as TCP flows share a
// link), while a pacer of the whole endpoint would let topic "hot"'s
// backlog hold back topic "cold". So the scope is the endpoint and topic,
// unless the refusal names a state of the whole broker process
// (ThrottledWide): its disk and page cache (STORAGE_LOAD), or its send
// thread pool's queue (RocketMQ's fast failures);
// producer/internal/send/pacing.go reads which refusals do, with
// RocketMQ's sources.
//
// Those widen the scope to the endpoint: every topic's attempts to it wait
// for the endpoint's pacer, then for their topic's.

// Result is what the broker made of an attempt, as the pacer counts it.
type Result int

const (
	// Other is any other outcome (a failure, a rejection): the pacer does
	// not count it.
	Other Result = iota
	// Stored: the broker stored the message.
	Stored
	// Throttled: the broker refused the message without a hint, for its
	// topic's state (a send rate, a backlog).
	Throttled
	// ThrottledWide: the broker refused the message without a hint, for a
	// state of the whole broker process: the endpoint is paced.
	ThrottledWide
	// Hinted: the broker refused the message with a hint of when to come
	// back (google.rpc.RetryInfo), which each send follows: an episode
	// ends.
	Hinted
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
	if p, ok := ps.topics.Load(topic); ok {
		return Pace{Endpoint: &ps.ep, Topic: p.(*Pacer)}
	}
	p, _ := ps.topics.LoadOrStore(topic, new(Pacer))
	return Pace{Endpoint: &ps.ep, Topic: p.(*Pacer)}
}

// Forget drops topic's pacer, as for a topic idle long enough that its
// throttle state says nothing of now; a later Of makes a new one. An
// attempt that holds the old pacer's Pace keeps using it.
func (ps *Pacers) Forget(topic string) { ps.topics.Delete(topic) }
