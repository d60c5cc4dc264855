package producer

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/rocketry-go/rocketry/brokercode"
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
// unless the refusal names a state of the whole broker process:
//
//   - STORAGE_LOAD: the broker's disk and page cache, shared by its topics;
//   - RocketMQ's fast failure, "[TIMEOUT_CLEAN_QUEUE]" (a request waited in
//     the broker's send thread pool queue longer than
//     waitTimeMillsInSendQueue, 200 ms by default), "[PCBUSY_CLEAN_QUEUE]",
//     "[PC_SYNCHRONIZED]" (the page cache is busy) and "[REJECTREQUEST]"
//     (the pool is full), all SYSTEM_BUSY, all of one queue or page cache
//     per broker process
//     (broker/src/main/java/org/apache/rocketmq/broker/latency/BrokerFastFailure.java,
//     broker/src/main/java/org/apache/rocketmq/broker/processor/SendMessageProcessor.java).
//     Through a cluster-mode proxy the client sees only the proxy's answer,
//     and its pacer is the route's broker name: the closest scope it can
//     name.
//
// Those widen the scope to the endpoint: every topic's attempts to it wait
// for the endpoint's pacer, then for their topic's.

// pace is the pacers an attempt goes through: its endpoint's and its
// topic's there. Either may be nil (pacing off, or no topic known).
type pace struct {
	ep, topic *pacer
}

// wait waits the attempt's turn at the endpoint's pacer, then at the
// topic's (see pacer.wait).
func (pc pace) wait(ctx context.Context) (ok bool, late bool) {
	if ok, late := pc.ep.wait(ctx); !ok {
		return ok, late
	}
	return pc.topic.wait(ctx)
}

// record counts the outcome of an attempt that started at start and ended
// at end in the scope it belongs to.
func (pc pace) record(o Outcome, start, end time.Time) {
	switch {
	case o.Kind == Stored:
		pc.ep.stored(start)
		pc.topic.stored(start)
		pc.ep.flew(start, end)
		pc.topic.flew(start, end)
	case o.Kind == Throttled && o.Hint > 0:
		pc.ep.hinted()
		pc.topic.hinted()
	case o.Kind == Throttled:
		if pc.topic == nil || wideThrottle(o) {
			pc.ep.throttled(start, end)
		} else {
			pc.topic.throttled(start, end)
		}
	}
}

// wideThrottle reports whether a refusal names a state of the whole broker
// (see above), rather than of the topic.
func wideThrottle(o Outcome) bool {
	if o.Reason == brokercode.ReasonStorageLoad {
		return true
	}
	if o.Err == nil {
		return false
	}
	msg := o.Err.Error()
	for _, s := range wideMarks {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// wideMarks are RocketMQ's fast-failure texts (see above).
var wideMarks = []string{"[TIMEOUT_CLEAN_QUEUE]", "[PCBUSY_CLEAN_QUEUE]", "[PC_SYNCHRONIZED]", "[REJECTREQUEST]"}

// pacers is the throttle state of one endpoint: its own pacer, and one per
// topic, made on first use. Its zero value is ready.
type pacers struct {
	ep     pacer
	topics sync.Map // topic -> *pacer
}

// of returns the pace of an attempt to topic ("": the endpoint's alone).
// It is on every attempt's path: a sync.Map read, no lock.
func (ps *pacers) of(topic string) pace {
	if topic == "" {
		return pace{ep: &ps.ep}
	}
	if p, ok := ps.topics.Load(topic); ok {
		return pace{ep: &ps.ep, topic: p.(*pacer)}
	}
	p, _ := ps.topics.LoadOrStore(topic, new(pacer))
	return pace{ep: &ps.ep, topic: p.(*pacer)}
}
