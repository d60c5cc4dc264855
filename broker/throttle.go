package broker

import (
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Throttle holds the thresholds above which the broker refuses sends with
// 530 TOO_MANY_REQUESTS (gRPC RESOURCE_EXHAUSTED). A zero threshold is off;
// the zero Throttle throttles nothing.
type Throttle struct {
	// MaxBacklog is the largest backlog of a topic the broker accepts sends
	// to; 0 means no limit. A topic's backlog is the largest number of
	// stored but uncommitted messages over its consumer groups; a topic
	// without consumer groups has a backlog of 0 (nobody is behind). Above
	// MaxBacklog, sends to the topic get 530 with reason BACKLOG until the
	// backlog falls to BacklogLowWater or under.
	MaxBacklog int64
	// BacklogLowWater is the backlog at or under which a topic throttled for
	// backlog accepts sends again; 0 means MaxBacklog*8/10. It must not be
	// above MaxBacklog.
	BacklogLowWater int64
	// ColdReadDistance is how far behind its queue's head a read message
	// must be to count as a cold read: a message is cold when more than
	// ColdReadDistance newer messages are stored after it in its queue.
	// 0 means 1000.
	ColdReadDistance int64
	// MaxStorageLoad is the largest rate of cold reads, per second, the
	// broker takes before it refuses sends with 530 STORAGE_LOAD; 0 means
	// no limit. Sends are refused while the rate is above it.
	MaxStorageLoad float64
	// StorageLoadWindow is the window the cold-read rate is measured over:
	// the rate is the cold reads of the last StorageLoadWindow divided by
	// its length in seconds. 0 means 1 s.
	StorageLoadWindow time.Duration
	// MaxSendRate is the most messages per second the broker accepts, over
	// all topics, with a burst of one second's worth (at least 1); 0 means
	// no limit. Over it, sends get 530 SEND_RATE. A batch larger than the
	// burst needs a full burst of tokens.
	MaxSendRate float64
}

// Defaults of Throttle fields whose zero value means a default.
const (
	DefaultColdReadDistance  = 1000
	DefaultStorageLoadWindow = time.Second
)

func (t Throttle) validate() error {
	switch {
	case t.MaxBacklog < 0:
		return fmt.Errorf("MaxBacklog %d is negative", t.MaxBacklog)
	case t.BacklogLowWater < 0:
		return fmt.Errorf("BacklogLowWater %d is negative", t.BacklogLowWater)
	case t.BacklogLowWater > 0 && t.BacklogLowWater > t.MaxBacklog:
		return fmt.Errorf("BacklogLowWater %d is above MaxBacklog %d", t.BacklogLowWater, t.MaxBacklog)
	case t.ColdReadDistance < 0:
		return fmt.Errorf("ColdReadDistance %d is negative", t.ColdReadDistance)
	case t.MaxStorageLoad < 0 || math.IsNaN(t.MaxStorageLoad) || math.IsInf(t.MaxStorageLoad, 0):
		return fmt.Errorf("MaxStorageLoad %v is not a finite rate >= 0", t.MaxStorageLoad)
	case t.StorageLoadWindow < 0:
		return fmt.Errorf("StorageLoadWindow %v is negative", t.StorageLoadWindow)
	case t.MaxSendRate < 0 || math.IsNaN(t.MaxSendRate) || math.IsInf(t.MaxSendRate, 0):
		return fmt.Errorf("MaxSendRate %v is not a finite rate >= 0", t.MaxSendRate)
	}
	return nil
}

// withDefaults fills in the fields whose zero value means a default.
func (t Throttle) withDefaults() Throttle {
	if t.BacklogLowWater == 0 {
		t.BacklogLowWater = t.MaxBacklog * 8 / 10
	}
	if t.ColdReadDistance == 0 {
		t.ColdReadDistance = DefaultColdReadDistance
	}
	if t.StorageLoadWindow == 0 {
		t.StorageLoadWindow = DefaultStorageLoadWindow
	}
	return t
}

// throttleState is a Throttle with its defaults applied and its send-rate
// limiter. It is replaced as a whole by SetThrottle.
type throttleState struct {
	Throttle
	limiter *rate.Limiter // nil when MaxSendRate is 0
	burst   int
}

func newThrottleState(t Throttle, now time.Time) *throttleState {
	s := &throttleState{Throttle: t.withDefaults()}
	if t.MaxSendRate > 0 {
		s.burst = int(math.Ceil(t.MaxSendRate))
		s.limiter = rate.NewLimiter(rate.Limit(t.MaxSendRate), s.burst)
	}
	return s
}

// allowSend takes n tokens (at most a burst) from the send-rate limiter. It
// answers how long to wait when there are not enough.
func (s *throttleState) allowSend(now time.Time, n int) (bool, time.Duration) {
	if s.limiter == nil {
		return true, 0
	}
	if n > s.burst {
		n = s.burst
	}
	if s.limiter.AllowN(now, n) {
		return true, 0
	}
	missing := float64(n) - s.limiter.TokensAt(now)
	return false, time.Duration(missing / s.MaxSendRate * float64(time.Second))
}

// event is a count of cold reads at one instant.
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
