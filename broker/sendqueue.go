package broker

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// SendQueue models the send thread pool of a RocketMQ broker and its fast
// failure, flow control that comes from the broker's state rather than
// from a rate: apache.rocketmq.v2 send requests are stored by Workers
// workers, each taking ServiceTime over a request (so the broker stores at
// most Workers/ServiceTime requests per second), and wait for a worker in
// a queue of at most Capacity requests. A request that finds the queue
// full is refused at once with the remoting layer's answer
//
//	[OVERLOAD]system busy, start flow control for a while
//
// (remoting/src/main/java/org/apache/rocketmq/remoting/netty/NettyRemotingAbstract.java),
// and one that has waited MaxWait without a worker is refused with
//
//	[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: 201ms, size of queue: 17
//
// as broker/src/main/java/org/apache/rocketmq/broker/latency/BrokerFastFailure.java
// writes it (the broker's waitTimeMillsInSendQueue, 200 ms by default).
// Both are the broker's SYSTEM_BUSY, which the proxy answers 42900
// TOO_MANY_REQUESTS with that text and no retry hint (50001 in local mode,
// see WithProxyMode). Nothing of a refused request is stored. rocketry.v1
// sends do not queue.
//
// The zero SendQueue (Workers 0) is off: requests are stored as they come.
type SendQueue struct {
	// Workers is how many requests the broker stores at once; 0 turns the
	// queue off.
	Workers int
	// ServiceTime is how long a worker takes over one request, whatever
	// its number of messages; 0 means no time, so that the queue only bounds
	// how many requests are stored at once.
	ServiceTime time.Duration
	// Capacity is how many requests may wait for a worker; 0 means 10,000
	// (the broker's sendThreadPoolQueueCapacity).
	Capacity int
	// MaxWait is how long a request may wait for a worker before it is
	// refused with [TIMEOUT_CLEAN_QUEUE]; 0 means 200 ms.
	MaxWait time.Duration
}

// Defaults of SendQueue fields whose zero value means a default.
const (
	DefaultSendQueueCapacity = 10_000
	DefaultSendQueueMaxWait  = 200 * time.Millisecond
)

// The tags of a RocketMQ broker's busy answers the send queue gives, as
// SendRecord.Reason and the keys of Stats' throttled counts name them.
const (
	ReasonTimeoutCleanQueue = "TIMEOUT_CLEAN_QUEUE"
	ReasonOverload          = "OVERLOAD"
)

// validate returns an error naming the first invalid field.
func (q SendQueue) validate() error {
	switch {
	case q.Workers < 0:
		//lint:ignore ST1005 the message starts with the field's name (WithSendQueue prefixes it)
		return fmt.Errorf("Workers %d is negative", q.Workers)
	case q.ServiceTime < 0:
		return fmt.Errorf("ServiceTime %v is negative", q.ServiceTime)
	case q.Capacity < 0:
		//lint:ignore ST1005 the message starts with the field's name (WithSendQueue prefixes it)
		return fmt.Errorf("Capacity %d is negative", q.Capacity)
	case q.MaxWait < 0:
		return fmt.Errorf("MaxWait %v is negative", q.MaxWait)
	}
	return nil
}

// WithSendQueue sets the broker's send queue (see SendQueue), overriding
// the default of none. A negative field is an error.
func WithSendQueue(q SendQueue) Option {
	return optionFunc(func(c *config) error {
		if err := q.validate(); err != nil {
			return errorf("WithSendQueue: %v", err)
		}
		c.sendQueue = q
		return nil
	})
}

// sendQueue is the state of a SendQueue; nil when it is off. Safe for
// concurrent use.
type sendQueue struct {
	cfg     SendQueue
	slots   chan struct{} // a token per busy worker
	waiting atomic.Int64  // requests waiting for a worker
	// refused counts the refusals, by tag.
	timeouts, overloads atomic.Int64
}

func newSendQueue(q SendQueue) *sendQueue {
	if q.Workers == 0 {
		return nil
	}
	if q.Capacity == 0 {
		q.Capacity = DefaultSendQueueCapacity
	}
	if q.MaxWait == 0 {
		q.MaxWait = DefaultSendQueueMaxWait
	}
	return &sendQueue{cfg: q, slots: make(chan struct{}, q.Workers)}
}

// wait queues a request until a worker takes it and has spent its service
// time, and returns the function that frees the worker once the request
// is stored; or it returns why the request is refused. Waiting ends early,
// refused, when ctx ends or stop is closed.
func (q *sendQueue) wait(ctx context.Context, stop <-chan struct{}) (func(), *refusal) {
	if q == nil {
		return nil, nil
	}
	select {
	case q.slots <- struct{}{}:
		return q.serve(stop)
	default:
	}
	start := time.Now()
	if n := q.waiting.Add(1); n > int64(q.cfg.Capacity) {
		q.waiting.Add(-1)
		q.overloads.Add(1)
		return nil, busy(ReasonOverload, "[OVERLOAD]system busy, start flow control for a while")
	}
	t := time.NewTimer(q.cfg.MaxWait)
	defer t.Stop()
	select {
	case q.slots <- struct{}{}:
		q.waiting.Add(-1)
		return q.serve(stop)
	case <-t.C:
		n := q.waiting.Add(-1)
		q.timeouts.Add(1)
		return nil, busy(ReasonTimeoutCleanQueue, fmt.Sprintf(
			"[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: %dms, size of queue: %d",
			time.Since(start).Milliseconds(), n))
	case <-ctx.Done():
		q.waiting.Add(-1)
		return nil, ctxRefusal(ctx, faultNone)
	case <-stop:
		q.waiting.Add(-1)
		return nil, unavailable(faultNone, "broker: stopping")
	}
}

// serve spends the service time of a request that holds a worker.
func (q *sendQueue) serve(stop <-chan struct{}) (func(), *refusal) {
	done := func() { <-q.slots }
	if q.cfg.ServiceTime <= 0 {
		return done, nil
	}
	t := time.NewTimer(q.cfg.ServiceTime)
	defer t.Stop()
	select {
	case <-t.C:
		return done, nil
	case <-stop:
		done()
		return nil, unavailable(faultNone, "broker: stopping")
	}
}

// busy is a refusal of the send queue: the broker's SYSTEM_BUSY with its
// remark.
func busy(tag, remark string) *refusal {
	return &refusal{code: rocketryv1.Code_CODE_TOO_MANY_REQUESTS, tag: tag, msg: remark}
}

// throttleCounts is the throttled counts of Stats: the throttler's by
// reason, and, when the broker has a send queue, the queue's by tag.
func (b *Broker) throttleCounts() map[string]int64 {
	out := b.throttle.counts()
	if q := b.sendQueue; q != nil {
		out[ReasonTimeoutCleanQueue], out[ReasonOverload] = q.timeouts.Load(), q.overloads.Load()
	}
	return out
}
