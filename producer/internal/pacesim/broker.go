package pacesim

import (
	"errors"
	"math/rand/v2"
	"time"
)

// Step is a capacity from a time on: from At (since the run's start), the
// broker stores Rate messages a second.
type Step struct {
	At   time.Duration
	Rate float64
}

// Bucket is a token bucket: Rate a second (or the Steps, when given), with
// a burst of Burst; it starts full.
type Bucket struct {
	Rate  float64
	Burst int
	Steps []Step
}

// Broker is the model broker. Every request reaches it RTT/2 after it
// leaves and is answered RTT/2 after the broker decides. A request is
// refused without a hint, as a RocketMQ 5 proxy refuses:
//
//   - by its topic's bucket (Topics, else Default; a topic with neither is
//     open), at once: 530 / 42900 for the topic;
//   - by the send queue, when Queue is over zero: the broker stores Queue
//     messages a second, one after the other, and a request that would
//     wait over QueueWait (200 ms, RocketMQ's waitTimeMillsInSendQueue) is
//     refused when it has waited that long, "[TIMEOUT_CLEAN_QUEUE]", a
//     state of the whole broker (BrokerFastFailure);
//   - never for its own sake, but with probability Noise: then once per
//     message, whatever the rate (a message's own refusal).
//
// Every StallEvery on average (exponential), the broker stalls for Stall
// (a collection, a descheduled process): what arrives meanwhile is
// decided at its end, together.
type Broker struct {
	RTT        time.Duration
	Default    *Bucket
	Topics     map[string]*Bucket
	Queue      float64
	QueueWait  time.Duration
	Noise      float64
	StallEvery time.Duration
	Stall      time.Duration
}

// The refusals' texts, as the RocketMQ 5 proxy words them: the pacer reads
// the fast failure's as the whole broker's state.
var (
	errRate  = errors.New("CODE: 42900 DESC: send rate over the topic's limit, try later")
	errQueue = errors.New("CODE: 42900 DESC: [TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while")
)

// broker is a Broker's state in a run.
type broker struct {
	cfg       Broker
	start     time.Time
	buckets   map[string]*bucket
	queueFree time.Time // the send queue's next free slot
	stallAt   time.Time // the next stall's start
	rnd       *rand.Rand
	refused   map[string]bool // Noise: messages refused once
}

type bucket struct {
	cfg    *Bucket
	tokens float64
	at     time.Time
}

func newBroker(cfg Broker, start time.Time, rnd *rand.Rand) *broker {
	if cfg.QueueWait == 0 {
		cfg.QueueWait = 200 * time.Millisecond
	}
	b := &broker{cfg: cfg, start: start, buckets: map[string]*bucket{}, rnd: rnd, refused: map[string]bool{}}
	b.stallAt = b.nextStall(start)
	return b
}

func (b *broker) nextStall(after time.Time) time.Time {
	if b.cfg.StallEvery <= 0 || b.cfg.Stall <= 0 {
		return time.Time{}
	}
	return after.Add(time.Duration(b.rnd.ExpFloat64() * float64(b.cfg.StallEvery)))
}

// decide is the broker's answer to message id of topic arriving at at: when
// it is decided, and the error (nil: stored).
func (b *broker) decide(topic, id string, at time.Time) (time.Time, error) {
	if !b.stallAt.IsZero() {
		for !at.Before(b.stallAt.Add(b.cfg.Stall)) {
			b.stallAt = b.nextStall(b.stallAt.Add(b.cfg.Stall))
		}
		if !at.Before(b.stallAt) {
			at = b.stallAt.Add(b.cfg.Stall)
		}
	}
	if b.cfg.Noise > 0 && !b.refused[id] && b.rnd.Float64() < b.cfg.Noise {
		b.refused[id] = true
		return at, errRate
	}
	if bk := b.bucket(topic); bk != nil && !bk.take(at, b.start) {
		return at, errRate
	}
	if b.cfg.Queue > 0 {
		begin := maxTime(at, b.queueFree)
		if begin.Sub(at) > b.cfg.QueueWait {
			return at.Add(b.cfg.QueueWait), errQueue
		}
		b.queueFree = begin.Add(time.Duration(float64(time.Second) / b.cfg.Queue))
		return b.queueFree, nil
	}
	return at, nil
}

func (b *broker) bucket(topic string) *bucket {
	if bk, ok := b.buckets[topic]; ok {
		return bk
	}
	cfg := b.cfg.Topics[topic]
	if cfg == nil {
		cfg = b.cfg.Default
	}
	var bk *bucket
	if cfg != nil {
		bk = &bucket{cfg: cfg, tokens: float64(cfg.Burst), at: b.start}
	}
	b.buckets[topic] = bk
	return bk
}

// Rate is the bucket's capacity at d after the start.
func (c *Bucket) rateAt(d time.Duration) float64 {
	r := c.Rate
	for _, s := range c.Steps {
		if d >= s.At {
			r = s.Rate
		}
	}
	return r
}

// capacity is what the bucket lets through from a to b after the start, at
// its rate (the burst not counted).
func (c *Bucket) capacity(a, b time.Duration) float64 {
	total := 0.0
	for t := a; t < b; {
		next := b
		for _, s := range c.Steps {
			if s.At > t && s.At < next {
				next = s.At
			}
		}
		total += c.rateAt(t) * (next - t).Seconds()
		t = next
	}
	return total
}

func (k *bucket) take(at, start time.Time) bool {
	if at.After(k.at) {
		k.tokens = min(k.tokens+k.cfg.capacity(k.at.Sub(start), at.Sub(start)), float64(k.cfg.Burst))
		k.at = at
	}
	if k.tokens < 1 {
		return false
	}
	k.tokens--
	return true
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
