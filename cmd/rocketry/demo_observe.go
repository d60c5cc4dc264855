package main

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/producer"
)

// maxReason bounds the throttle reasons counted by index; a reason at or
// above it is counted as UNSPECIFIED.
const maxReason = 8

// demoCounters counts the producer's events. observe is the producer's
// Observer: it runs on producer goroutines and only touches atomics.
type demoCounters struct {
	attempts         atomic.Int64
	throttled        [maxReason]atomic.Int64 // by rocketryv1.ThrottleReason
	retryThrottled   atomic.Int64            // retries scheduled after a 530
	retryFailure     atomic.Int64            // retries scheduled after a failure or timeout
	failureCodes     [17]atomic.Int64        // retries after a failure, by gRPC code
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
	errs      map[string]int // ended sends by error text, for the report
}

func newDemoCounters(n int) *demoCounters {
	return &demoCounters{latencies: make([]time.Duration, 0, n), errs: map[string]int{}}
}

func (c *demoCounters) observe(e producer.Event) {
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
		if e.Why == producer.Throttled {
			c.retryThrottled.Add(1)
			c.lastBackoff.Store(int64(e.Delay))
		} else {
			c.retryFailure.Add(1)
			code := status.Code(e.Err)
			if int(code) >= len(c.failureCodes) {
				code = codes.Unknown
			}
			c.failureCodes[code].Add(1)
		}
	case producer.EventExhausted:
		c.exhausted.Add(1)
	case producer.EventDeadLetter:
		c.deadLettered.Add(1)
	}
}

// failuresByCode returns the retries after a failure by gRPC code name
// (INTERNAL, UNAVAILABLE, DEADLINE_EXCEEDED, ...).
func (c *demoCounters) failuresByCode() map[string]int64 {
	out := map[string]int64{}
	for code := range c.failureCodes {
		if n := c.failureCodes[code].Load(); n > 0 {
			out[strings.ToUpper(toSnake(codes.Code(code).String()))] = n
		}
	}
	return out
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
func (c *demoCounters) retryingNow() int64 {
	n := c.retryThrottled.Load() + c.retryFailure.Load() - c.retryAttempts.Load()
	return max(n, 0)
}

// ended records the end of one message's send, started at start.
func (c *demoCounters) ended(start time.Time, err error) {
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
func (c *demoCounters) throttledByReason() map[string]int64 {
	out := map[string]int64{"BACKLOG": 0, "STORAGE_LOAD": 0}
	for r := range c.throttled {
		if n := c.throttled[r].Load(); n > 0 {
			out[reasonName(rocketryv1.ThrottleReason(r))] += n
		}
	}
	return out
}

// reasonName is a throttle reason without its enum prefix: "BACKLOG".
func reasonName(r rocketryv1.ThrottleReason) string {
	return strings.TrimPrefix(r.String(), "THROTTLE_REASON_")
}

// latencyQuantiles returns the p50, p99 and largest send latency.
func (c *demoCounters) latencyQuantiles() (p50, p99, top time.Duration) {
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

// sendErrorKind is an ended send's error without what is particular to
// one message (its ID, the text of the last gRPC status), so that errors
// can be counted by kind.
func sendErrorKind(err error) string {
	s := err.Error()
	var se *producer.SendError
	if errors.As(err, &se) && se.MessageID != "" {
		s = strings.Replace(s, " of message "+strconv.Quote(se.MessageID), "", 1)
	}
	if i := strings.Index(s, " desc = "); i >= 0 {
		s = s[:i]
	}
	return shortError(errors.New(s))
}

// shortError keeps the first line of an error, at most 160 bytes.
func shortError(err error) string {
	s := oneLine(err.Error())
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}
