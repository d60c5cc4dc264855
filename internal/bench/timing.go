package bench

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/rocketry-go/rocketry/producer"
)

// Timing is the retry timing of rocketry's sends: for each retry, the
// actual wait (from the start of the attempt before it to the start of the
// retry) minus the scheduled one (the EventRetry's Delay, or the attempt's
// own duration when that was longer).
type Timing struct {
	Retries int     `json:"retries"`
	P50ms   float64 `json:"p50_late_ms"`
	P90ms   float64 `json:"p90_late_ms"`
	P99ms   float64 `json:"p99_late_ms"`
	MaxMs   float64 `json:"max_late_ms"`
	// Early counts retries made before their scheduled time (should be 0).
	Early int `json:"early"`
}

// timingRecorder keeps, per message, the time of its last attempt and the
// wait scheduled after it. It is sharded by message ID so that 64 senders do
// not queue on one lock (which would delay the attempts it measures).
type timingRecorder struct {
	shards [64]timingShard
}

type timingShard struct {
	mu      sync.Mutex
	pending map[string]pendingRetry
	late    []time.Duration
	early   int
}

type pendingRetry struct {
	attemptAt time.Time     // EventAttempt of the attempt that failed
	due       time.Duration // scheduled wait from attemptAt
	retry     bool          // an EventRetry was seen
}

func newTimingRecorder() *timingRecorder {
	t := &timingRecorder{}
	for i := range t.shards {
		t.shards[i].pending = map[string]pendingRetry{}
	}
	return t
}

func (t *timingRecorder) shard(id string) *timingShard {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h = (h ^ uint32(id[i])) * 16777619
	}
	return &t.shards[h%uint32(len(t.shards))]
}

func (t *timingRecorder) observe(e producer.Event) {
	now := time.Now()
	switch e.Kind {
	case producer.EventAttempt, producer.EventRetry, producer.EventSuccess, producer.EventExhausted:
	default:
		return
	}
	sh := t.shard(e.MessageID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	switch e.Kind {
	case producer.EventAttempt:
		if p, ok := sh.pending[e.MessageID]; ok && p.retry {
			late := now.Sub(p.attemptAt) - p.due
			if late < 0 {
				sh.early++
			}
			sh.late = append(sh.late, late)
		}
		sh.pending[e.MessageID] = pendingRetry{attemptAt: now}
	case producer.EventRetry:
		p := sh.pending[e.MessageID]
		p.due = max(e.Delay, now.Sub(p.attemptAt))
		p.retry = true
		sh.pending[e.MessageID] = p
	default:
		delete(sh.pending, e.MessageID)
	}
}

func (t *timingRecorder) result() *Timing {
	var late []time.Duration
	r := &Timing{}
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		late = append(late, sh.late...)
		r.Early += sh.early
		sh.mu.Unlock()
	}
	r.Retries = len(late)
	if len(late) > 0 {
		r.P50ms = percentileMs(late, 0.50)
		r.P90ms = percentileMs(late, 0.90)
		r.P99ms = percentileMs(late, 0.99)
		r.MaxMs = float64(late[len(late)-1]) / float64(time.Millisecond)
	}
	return r
}

// controlTimer waits on a time.Timer for random delays of 1 to 50 ms until
// ctx ends, recording how late each wait ended in t's first shard.
func controlTimer(ctx context.Context, t *timingRecorder, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 42))
	sh := &t.shards[0]
	for {
		d := time.Millisecond + time.Duration(r.Int64N(int64(49*time.Millisecond)))
		start := time.Now()
		tm := time.NewTimer(d)
		select {
		case <-ctx.Done():
			tm.Stop()
			return
		case <-tm.C:
		}
		late := time.Since(start) - d
		sh.mu.Lock()
		sh.late = append(sh.late, late)
		if late < 0 {
			sh.early++
		}
		sh.mu.Unlock()
	}
}
