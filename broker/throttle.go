package broker

import (
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// Throttle holds the thresholds above which the broker refuses sends with
// 530 TOO_MANY_REQUESTS (gRPC RESOURCE_EXHAUSTED; apache.rocketmq.v2 42900
// TOO_MANY_REQUESTS). A zero threshold is off; the zero Throttle throttles
// nothing.
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

// validate returns an error naming the first invalid field; it wraps
// ErrInvalidThrottle.
func (t Throttle) validate() error {
	bad := func(format string, args ...any) error {
		return &invalidError{kind: ErrInvalidThrottle, msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case t.MaxBacklog < 0:
		return bad("MaxBacklog %d is negative", t.MaxBacklog)
	case t.BacklogLowWater < 0:
		return bad("BacklogLowWater %d is negative", t.BacklogLowWater)
	case t.BacklogLowWater > 0 && t.BacklogLowWater > t.MaxBacklog:
		return bad("BacklogLowWater %d is above MaxBacklog %d", t.BacklogLowWater, t.MaxBacklog)
	case t.ColdReadDistance < 0:
		return bad("ColdReadDistance %d is negative", t.ColdReadDistance)
	case t.MaxStorageLoad < 0 || math.IsNaN(t.MaxStorageLoad) || math.IsInf(t.MaxStorageLoad, 0):
		return bad("MaxStorageLoad %v is not a finite rate >= 0", t.MaxStorageLoad)
	case t.StorageLoadWindow < 0:
		return bad("StorageLoadWindow %v is negative", t.StorageLoadWindow)
	case t.MaxSendRate < 0 || math.IsNaN(t.MaxSendRate) || math.IsInf(t.MaxSendRate, 0):
		return bad("MaxSendRate %v is not a finite rate >= 0", t.MaxSendRate)
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

// limits is a Throttle with its defaults applied and its send-rate
// limiter. The throttler replaces it as a whole when the thresholds change.
type limits struct {
	Throttle
	limiter *rate.Limiter // nil when MaxSendRate is 0
	burst   int
}

func newLimits(t Throttle) *limits {
	l := &limits{Throttle: t.withDefaults()}
	if t.MaxSendRate > 0 {
		l.burst = int(math.Ceil(t.MaxSendRate))
		l.limiter = rate.NewLimiter(rate.Limit(t.MaxSendRate), l.burst)
	}
	return l
}

// cold reports whether reading offset off of a queue of n messages is a
// cold read.
func (l *limits) cold(n int, off int64) bool {
	return int64(n)-1-off > l.ColdReadDistance
}

// throttler decides every refusal for load, and is the only place that
// does. It owns the thresholds (replaced as a whole by set) and the state
// machine of each reason:
//
//   - BACKLOG: each topic's backlogState (kept in the topic, guarded by its
//     mu), in above MaxBacklog and out at BacklogLowWater or under, with the
//     drain estimate behind its RetryInfo hint;
//   - STORAGE_LOAD: the cold-read rate over StorageLoadWindow, refused
//     while above MaxStorageLoad, with a hint of when the rate falls;
//   - SEND_RATE: a token bucket.
//
// It counts its refusals by reason. Safe for concurrent use.
type throttler struct {
	log           *slog.Logger
	cur           atomic.Pointer[limits]
	cold          rateWindow // cold reads
	coldThrottled atomic.Bool
	refused       [4]atomic.Int64 // by rocketryv1.ThrottleReason
	episodes      [4]atomic.Int64 // throttling spells begun, by reason (metrics.go)
	coldTotal     atomic.Int64    // cold reads, ever (metrics.go)
}

func newThrottler(t Throttle, log *slog.Logger) *throttler {
	th := &throttler{log: log}
	th.cur.Store(newLimits(t))
	return th
}

// limits returns the thresholds in force. A caller takes them once per
// call, so that one call sees one set.
func (th *throttler) limits() *limits { return th.cur.Load() }

// set validates t and puts it in force.
func (th *throttler) set(t Throttle) error {
	if err := t.validate(); err != nil {
		return err
	}
	th.cur.Store(newLimits(t))
	th.log.Info("broker: thresholds set", "max_backlog", t.MaxBacklog, "backlog_low_water", t.BacklogLowWater,
		"cold_read_distance", t.ColdReadDistance, "max_storage_load", t.MaxStorageLoad,
		"storage_load_window", t.StorageLoadWindow, "max_send_rate", t.MaxSendRate)
	return nil
}

// refuse counts a refusal for reason and returns it.
func (th *throttler) refuse(reason rocketryv1.ThrottleReason, retry time.Duration, msg string) *refusal {
	th.refused[reason].Add(1)
	return &refusal{code: rocketryv1.Code_CODE_TOO_MANY_REQUESTS, reason: reason, retry: retry, msg: msg}
}

// checkStorageLoad refuses with STORAGE_LOAD while the cold-read rate is
// above its maximum.
func (th *throttler) checkStorageLoad(l *limits, now time.Time) *refusal {
	if l.MaxStorageLoad <= 0 {
		if th.coldThrottled.Load() && th.coldThrottled.CompareAndSwap(true, false) {
			th.log.Info("broker: throttling lifted", "reason", "STORAGE_LOAD")
		}
		return nil
	}
	r, wait := th.cold.rate(now, l.StorageLoadWindow, l.MaxStorageLoad)
	if r > l.MaxStorageLoad {
		if th.coldThrottled.CompareAndSwap(false, true) {
			th.episodes[rocketryv1.ThrottleReason_THROTTLE_REASON_STORAGE_LOAD].Add(1)
			th.log.Warn("broker: throttling sends", "reason", "STORAGE_LOAD", "storage_load", r, "max", l.MaxStorageLoad)
		}
		return th.refuse(rocketryv1.ThrottleReason_THROTTLE_REASON_STORAGE_LOAD, wait,
			fmt.Sprintf("broker: storage load %.1f cold reads/s is over %.1f; nothing stored", r, l.MaxStorageLoad))
	}
	if th.coldThrottled.Load() && th.coldThrottled.CompareAndSwap(true, false) {
		th.log.Info("broker: throttling lifted", "reason", "STORAGE_LOAD", "storage_load", r, "max", l.MaxStorageLoad)
	}
	return nil
}

// coldReads records n cold reads at now.
func (th *throttler) coldReads(l *limits, now time.Time, n int64) {
	th.coldTotal.Add(n)
	th.cold.add(now, n, l.StorageLoadWindow)
}

// storageLoad is the cold-read rate at now and whether it is over the
// maximum.
func (th *throttler) storageLoad(now time.Time) (float64, bool) {
	l := th.limits()
	r, _ := th.cold.rate(now, l.StorageLoadWindow, 0)
	return r, l.MaxStorageLoad > 0 && r > l.MaxStorageLoad
}

// admitLocked decides whether a send of n new messages to t may store:
// BACKLOG first, then SEND_RATE. The caller holds t.mu.
func (th *throttler) admitLocked(t *topic, l *limits, n int, now time.Time) *refusal {
	if l.MaxBacklog > 0 || t.backlog.throttled {
		bl := t.backlogLocked()
		th.transitionLocked(t, bl, l, now)
		if t.backlog.throttled {
			return th.refuse(rocketryv1.ThrottleReason_THROTTLE_REASON_BACKLOG, th.backlogWait(t, bl, l, now),
				fmt.Sprintf("broker: backlog of topic %q is %d, over %d (accepting again at %d or under); nothing stored",
					t.name, bl, l.MaxBacklog, l.BacklogLowWater))
		}
	}
	if ok, wait := l.allowSend(now, n); !ok {
		return th.refuse(rocketryv1.ThrottleReason_THROTTLE_REASON_SEND_RATE, wait,
			fmt.Sprintf("broker: send rate over %.1f messages/s; nothing stored", l.MaxSendRate))
	}
	return nil
}

// backlogChangedLocked moves t in or out of backlog throttling after its
// backlog changed (a store, a commit, a reset). The caller holds t.mu.
func (th *throttler) backlogChangedLocked(t *topic, l *limits, now time.Time) {
	if l.MaxBacklog <= 0 && !t.backlog.throttled {
		return
	}
	th.transitionLocked(t, t.backlogLocked(), l, now)
}

// consumedLocked records that commits moved a group of t n messages
// forward at now, for the drain estimate. The caller holds t.mu.
func (th *throttler) consumedLocked(t *topic, l *limits, now time.Time, n int64) {
	s := &t.backlog
	if n <= 0 {
		return
	}
	if s.consumedTotal == 0 {
		s.firstConsumed = now
	}
	s.consumedTotal += n
	s.commits++
	s.consumed.add(now, n, l.StorageLoadWindow)
}

// transitionLocked moves t in or out of backlog throttling, with
// hysteresis: in above MaxBacklog, out at BacklogLowWater or under. It
// notes when a spell begins, and on its end the drain rate measured over
// it, for backlogWait.
func (th *throttler) transitionLocked(t *topic, bl int64, l *limits, now time.Time) {
	s := &t.backlog
	switch {
	case l.MaxBacklog <= 0:
		if s.throttled {
			s.end(now)
			th.log.Info("broker: throttling lifted", "reason", "BACKLOG", "topic", t.name, "backlog", bl)
		}
	case !s.throttled && bl > l.MaxBacklog:
		s.throttled = true
		s.throttledAt, s.consumedAtThrottle, s.commitsAtThrottle = now, s.consumedTotal, s.commits
		th.episodes[rocketryv1.ThrottleReason_THROTTLE_REASON_BACKLOG].Add(1)
		th.log.Warn("broker: throttling sends", "reason", "BACKLOG", "topic", t.name, "backlog", bl,
			"max", l.MaxBacklog, "low_water", l.BacklogLowWater)
	case s.throttled && bl <= l.BacklogLowWater:
		s.end(now)
		th.log.Info("broker: throttling lifted", "reason", "BACKLOG", "topic", t.name, "backlog", bl,
			"low_water", l.BacklogLowWater)
	}
}

// backlogWait estimates when t's backlog falls to the low-water mark and
// the commit that gets it there has come: the excess over the mark divided
// by the drain rate, plus the drain's step (backlogState.drain), at least
// 1 ms and at most the window; the window when nothing drains. Without the
// step, a hint shorter than the time between the consumer's commits sends
// a producer back before the backlog has moved, to be refused again. Every
// sender refused at the same moment gets the same hint; a producer spreads
// its retries with its own schedule's jitter.
func (th *throttler) backlogWait(t *topic, bl int64, l *limits, now time.Time) time.Duration {
	dr := t.backlog.drain(now, l.StorageLoadWindow)
	if dr.rate <= 0 {
		return l.StorageLoadWindow
	}
	d := time.Duration(float64(bl-l.BacklogLowWater)/dr.rate*float64(time.Second)) + dr.step
	return min(max(d, time.Millisecond), l.StorageLoadWindow)
}

// counts returns the refusals by reason name.
func (th *throttler) counts() map[string]int64 {
	out := make(map[string]int64, len(throttleNames))
	for r, name := range throttleNames {
		out[name] = th.refused[r].Load()
	}
	return out
}

// allowSend takes n tokens (at most a burst) from the send-rate limiter. It
// answers how long to wait when there are not enough.
func (l *limits) allowSend(now time.Time, n int) (bool, time.Duration) {
	if l.limiter == nil {
		return true, 0
	}
	if n > l.burst {
		n = l.burst
	}
	if l.limiter.AllowN(now, n) {
		return true, 0
	}
	missing := float64(n) - l.limiter.TokensAt(now)
	return false, time.Duration(missing / l.MaxSendRate * float64(time.Second))
}

// backlogState is a topic's BACKLOG state machine and the measure of how
// fast its backlog drains. It is guarded by its topic's mu and changed only
// by the throttler.
type backlogState struct {
	throttled bool
	consumed  rateWindow // commits that moved groups forward, for the drain rate
	// consumedTotal and commits count the messages of those commits and
	// the commits, ever; firstConsumed is when they first grew (zero
	// before).
	consumedTotal int64
	commits       int64
	firstConsumed time.Time
	// throttledAt, consumedAtThrottle and commitsAtThrottle are the time,
	// consumedTotal and commits when the current throttling spell began.
	throttledAt        time.Time
	consumedAtThrottle int64
	commitsAtThrottle  int64
	// lastSpell is the drain measured over the last spell that lasted at
	// least minDrainSpan; a zero rate if none did.
	lastSpell drainRate
}

// minDrainSpan is the shortest time a drain rate is measured over.
const minDrainSpan = 10 * time.Millisecond

// drainRate is how fast a topic's backlog falls: rate messages per second,
// in commits a step apart on average (0: not known).
type drainRate struct {
	rate float64
	step time.Duration
}

// end ends the throttling spell, keeping its drain rate when the spell was
// long enough to measure it.
func (s *backlogState) end(now time.Time) {
	if dr, ok := s.spellDrain(now); ok && dr.rate > 0 {
		s.lastSpell = dr
	}
	s.throttled = false
}

// spellDrain is the drain since the current throttling spell began, if
// the spell has lasted at least minDrainSpan. While a topic is throttled
// its backlog is above the low-water mark, so its consumers are never
// short of messages: this is their real rate.
func (s *backlogState) spellDrain(now time.Time) (drainRate, bool) {
	d := now.Sub(s.throttledAt)
	if !s.throttled || d < minDrainSpan {
		return drainRate{}, false
	}
	dr := drainRate{rate: float64(s.consumedTotal-s.consumedAtThrottle) / d.Seconds()}
	if c := s.commits - s.commitsAtThrottle; c > 0 {
		dr.step = d / time.Duration(c)
	}
	return dr, true
}

// drain estimates how fast the backlog falls: as in the current spell once
// it has lasted minDrainSpan, else as in the last spell, else the rate of
// the last window (over the time since the first commit when that is
// shorter, so that the time before anything was consumed does not count)
// with no step.
func (s *backlogState) drain(now time.Time, window time.Duration) drainRate {
	if dr, ok := s.spellDrain(now); ok {
		return dr
	}
	if s.lastSpell.rate > 0 {
		return s.lastSpell
	}
	if s.consumedTotal == 0 {
		return drainRate{}
	}
	return drainRate{rate: s.consumed.rateSince(now, window, s.firstConsumed)}
}
