package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/brokercode"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/producer"
)

// maxReason bounds the throttle reasons counted by index; a reason at or
// above it is counted as UNSPECIFIED.
const maxReason = 8

// sendCounters counts the producer's events. observe is the producer's
// Observer: it runs on producer goroutines and only touches atomics.
type sendCounters struct {
	attempts         atomic.Int64
	throttled        [maxReason]atomic.Int64 // by brokercode.Reason
	retryThrottled   atomic.Int64            // retries scheduled after a 530
	retryFailure     atomic.Int64            // retries scheduled after a failure or timeout
	retryNotStored   atomic.Int64            // of retryFailure: Why FailedNotStored
	retryUnknown     atomic.Int64            // of retryFailure: Why FailedUnknown
	endedUnknown     atomic.Int64            // sends that failed for good on an unknown outcome
	retryAttempts    atomic.Int64            // attempts after the first
	deadLettered     atomic.Int64
	exhausted        atomic.Int64
	lastBackoff      atomic.Int64 // the last wait chosen after throttling, in ns
	maxAttemptsOfOne atomic.Int64

	done     atomic.Int64 // messages whose send ended, either way
	stored   atomic.Int64 // messages whose send succeeded
	failed   atomic.Int64 // messages whose send ended with an error
	inFlight atomic.Int64 // messages handed to the producer and not yet ended

	mu        sync.Mutex
	latencies []time.Duration
	errs      map[string]int   // ended sends by error text, for the report
	failures  map[string]int64 // retries after a failure, by the answer's code (failureLabel)
}

func newSendCounters(n int) *sendCounters {
	return &sendCounters{latencies: make([]time.Duration, 0, n), errs: map[string]int{}, failures: map[string]int64{}}
}

func (c *sendCounters) observe(e producer.Event) {
	switch e.Kind {
	case producer.EventAttempt:
		c.attempts.Add(1)
		if e.Attempt > 1 {
			c.retryAttempts.Add(1)
		}
		for {
			m := c.maxAttemptsOfOne.Load()
			if int64(e.Attempt) <= m || c.maxAttemptsOfOne.CompareAndSwap(m, int64(e.Attempt)) {
				break
			}
		}
	case producer.EventThrottle:
		r := int(e.Reason)
		if r < 0 || r >= maxReason {
			r = 0
		}
		c.throttled[r].Add(1)
	case producer.EventRetry:
		switch e.Why {
		case producer.Throttled:
			c.retryThrottled.Add(1)
			c.lastBackoff.Store(int64(e.Delay))
		default: // FailedNotStored or FailedUnknown
			c.retryFailure.Add(1)
			if e.Why == producer.FailedNotStored {
				c.retryNotStored.Add(1)
			} else {
				c.retryUnknown.Add(1)
			}
			label := failureLabel(e.Err)
			c.mu.Lock() // failures are few: a lock is cheap enough here
			c.failures[label]++
			c.mu.Unlock()
		}
	case producer.EventExhausted:
		c.exhausted.Add(1)
		if endedUnknown(e.Err) {
			c.endedUnknown.Add(1)
		}
	case producer.EventDeadLetter:
		c.deadLettered.Add(1)
	}
}

// endedUnknown reports whether err, a failed send's, ended on an attempt
// whose outcome the producer could not know (the broker may hold the
// message).
func endedUnknown(err error) bool {
	var se *producer.SendError
	return errors.As(err, &se) && se.Last == producer.FailedUnknown
}

// unknownOutcomes counts the attempts whose outcome the producer could not
// know: its retries after one, and the sends that ended on one. Each may
// have stored the message, so each is at most one copy where the broker
// does not deduplicate (apache.rocketmq.v2, as the Apache proxy).
func (c *sendCounters) unknownOutcomes() int64 {
	return c.retryUnknown.Load() + c.endedUnknown.Load()
}

// failureLabel names what a failed attempt answered, as its protocol
// spelt it: an apache.rocketmq.v2 body status (INTERNAL_SERVER_ERROR, ...),
// else the gRPC code (INTERNAL, UNAVAILABLE, DEADLINE_EXCEEDED, ...).
func failureLabel(err error) string {
	var rs *producer.RocketMQStatusError
	if errors.As(err, &rs) {
		return rocketmqv2.Code(rs.Code).String()
	}
	return strings.ToUpper(toSnake(status.Code(err).String()))
}

// failuresByCode returns the retries after a failure by failureLabel.
func (c *sendCounters) failuresByCode() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.failures)
}

// failuresByKind returns the retries after a failure by the kind of the
// attempt's outcome (producer.OutcomeKind's names).
func (c *sendCounters) failuresByKind() map[string]int64 {
	return map[string]int64{
		producer.FailedNotStored.String(): c.retryNotStored.Load(),
		producer.FailedUnknown.String():   c.retryUnknown.Load(),
	}
}

// toSnake turns a gRPC code's Go name (DeadlineExceeded) into its
// canonical form's words (Deadline_Exceeded).
func toSnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// retryingNow is the number of retries chosen whose attempt has not started:
// messages waiting out a backoff.
func (c *sendCounters) retryingNow() int64 {
	n := c.retryThrottled.Load() + c.retryFailure.Load() - c.retryAttempts.Load()
	return max(n, 0)
}

// ended records the end of one message's send, started at start.
func (c *sendCounters) ended(start time.Time, err error) {
	d := time.Since(start)
	c.mu.Lock()
	c.latencies = append(c.latencies, d)
	if err != nil {
		c.errs[sendErrorKind(err)]++
	}
	c.mu.Unlock()
	if err != nil {
		c.failed.Add(1)
	} else {
		c.stored.Add(1)
	}
	c.inFlight.Add(-1)
	c.done.Add(1)
}

// throttledByReason returns the throttle counts by reason name (BACKLOG,
// STORAGE_LOAD, ...), always with BACKLOG and STORAGE_LOAD present.
func (c *sendCounters) throttledByReason() map[string]int64 {
	out := map[string]int64{"BACKLOG": 0, "STORAGE_LOAD": 0}
	for r := range c.throttled {
		if n := c.throttled[r].Load(); n > 0 {
			out[brokercode.Reason(r).String()] += n
		}
	}
	return out
}

// latencyQuantiles returns the p50, p99 and largest send latency.
func (c *sendCounters) latencyQuantiles() (p50, p99, top time.Duration) {
	c.mu.Lock()
	l := slices.Clone(c.latencies)
	c.mu.Unlock()
	if len(l) == 0 {
		return 0, 0, 0
	}
	slices.Sort(l)
	q := func(p float64) time.Duration {
		i := int(p*float64(len(l))+0.5) - 1
		return l[min(max(i, 0), len(l)-1)]
	}
	return q(0.50), q(0.99), l[len(l)-1]
}

// sendErrorKind is what an ended send's error says, without what is
// particular to one message, so that errors can be counted by kind: why
// the send ended, after how many attempts, and the last attempt's answer
// (failureLabel), read from the *producer.SendError's fields.
func sendErrorKind(err error) string {
	var se *producer.SendError
	if !errors.As(err, &se) {
		return shortError(err)
	}
	why := "failed"
	for _, w := range []struct {
		err  error
		name string
	}{
		{producer.ErrAttemptsExhausted, "attempts exhausted"},
		{producer.ErrDeadlineTooShort, "deadline too short for the next attempt"},
		{producer.ErrNotRetryable, "not retryable"},
		{producer.ErrRetryBudget, "retry budget spent"},
		{producer.ErrClosed, "producer closed"},
		{context.DeadlineExceeded, "the run's deadline"},
		{context.Canceled, "cancelled"},
	} {
		if errors.Is(se, w.err) {
			why = w.name
			break
		}
	}
	s := fmt.Sprintf("%s after %s", why, plural(int64(se.Attempts), "attempt", "attempts"))
	if se.Cause != nil {
		s += ", the last " + se.Last.String() + " (" + failureLabel(se.Cause) + ")"
	}
	if se.DeadLettered {
		s += ", spooled"
	}
	return s
}

// shortError keeps the first line of an error, at most 160 bytes.
func shortError(err error) string {
	s := cleanError(err)
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}
