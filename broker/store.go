package broker

import (
	"sync"
	"time"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// topic is one topic: its queues, its dedup window and its consumer groups.
// Every field below mu is guarded by mu.
type topic struct {
	name string

	mu     sync.Mutex
	queues [][]*rocketryv1.Message // the log of each queue; offset = index
	next   int                     // the queue of the next new message (round-robin)
	stored int64
	dedup  dedup
	groups map[string]*group
	// backlog throttling (hysteresis) and the drain rate of its hint
	throttled bool
	consumed  rateWindow // commits that moved groups forward, for the drain rate
	// consumedTotal and commits count the messages of those commits and
	// the commits, ever; firstConsumed is when they first grew (zero
	// before).
	consumedTotal int64
	commits       int64
	firstConsumed time.Time
	// throttledAt, consumedAtThrottle and commitsAtThrottle are the time,
	// consumedTotal and commits when the current backlog throttling spell
	// began.
	throttledAt        time.Time
	consumedAtThrottle int64
	commitsAtThrottle  int64
	// spellDrain is the drain measured over the last spell that lasted at
	// least minDrainSpan; a zero rate if none did.
	spellDrain drain
}

// group is a consumer group's committed offsets on one topic.
type group struct {
	committed []int64 // per queue: the offset of the next message to read
	backlog   int64   // sum over queues of (head - committed)
}

func newTopic(name string, queues int, dedupCount int) *topic {
	return &topic{
		name:   name,
		queues: make([][]*rocketryv1.Message, queues),
		groups: map[string]*group{},
		dedup:  dedup{limit: dedupCount, ids: map[string]dedupEntry{}},
	}
}

// backlogLocked is the largest backlog over the groups; 0 without groups.
func (t *topic) backlogLocked() int64 {
	var b int64
	for _, g := range t.groups {
		b = max(b, g.backlog)
	}
	return b
}

// groupLocked returns the group named name, created at offset 0 when new.
func (t *topic) groupLocked(name string) *group {
	g := t.groups[name]
	if g == nil {
		g = &group{committed: make([]int64, len(t.queues)), backlog: t.stored}
		t.groups[name] = g
	}
	return g
}

// commitLocked moves g's committed offset of queue q to off and returns how
// far forward it moved (negative when backward).
func (t *topic) commitLocked(g *group, q int, off int64) int64 {
	d := off - g.committed[q]
	g.committed[q] = off
	g.backlog -= d
	return d
}

// consumeLocked records that commits moved a group n messages forward at
// now.
func (t *topic) consumeLocked(now time.Time, n int64, window time.Duration) {
	if n <= 0 {
		return
	}
	if t.consumedTotal == 0 {
		t.firstConsumed = now
	}
	t.consumedTotal += n
	t.commits++
	t.consumed.add(now, n, window)
}

// minDrainSpan is the shortest time a drain rate is measured over.
const minDrainSpan = 10 * time.Millisecond

// drain is how fast a topic's backlog falls: rate messages per second, in
// commits a step apart on average (0: not known).
type drain struct {
	rate float64
	step time.Duration
}

// spellDrainLocked is the drain since the current backlog throttling spell
// began, if the spell has lasted at least minDrainSpan. While a topic is
// throttled its backlog is above the low-water mark, so its consumers are
// never short of messages: this is their real rate.
func (t *topic) spellDrainLocked(now time.Time) (drain, bool) {
	d := now.Sub(t.throttledAt)
	if !t.throttled || d < minDrainSpan {
		return drain{}, false
	}
	dr := drain{rate: float64(t.consumedTotal-t.consumedAtThrottle) / d.Seconds()}
	if c := t.commits - t.commitsAtThrottle; c > 0 {
		dr.step = d / time.Duration(c)
	}
	return dr, true
}

// drainLocked estimates how fast t's backlog falls: as in the current
// throttling spell once it has lasted minDrainSpan, else as in the last
// spell, else the rate of the last window (over the time since the first
// commit when that is shorter, so that the time before anything was
// consumed does not count) with no step.
func (t *topic) drainLocked(now time.Time, window time.Duration) drain {
	if dr, ok := t.spellDrainLocked(now); ok {
		return dr
	}
	if t.spellDrain.rate > 0 {
		return t.spellDrain
	}
	if t.consumedTotal == 0 {
		return drain{}
	}
	return drain{rate: t.consumed.rateSince(now, window, t.firstConsumed)}
}

// dedupEntry is where an id was stored.
type dedupEntry struct {
	queue  int32
	offset int64
	seq    uint64 // which ring slot remembers it
	at     int64  // unix nanoseconds when stored (for the ttl)
}

// ringEntry is one remembered id, oldest first.
type ringEntry struct {
	id  string
	seq uint64
	at  int64
}

// dedup remembers the ids of the last limit stored messages of a topic,
// for at most ttl when ttl > 0.
type dedup struct {
	limit int
	ids   map[string]dedupEntry
	fifo  []ringEntry // fifo[head:] are remembered, oldest first
	head  int
	seq   uint64
}

// lookup returns where id was stored, if remembered.
func (d *dedup) lookup(id string, now int64, ttl time.Duration) (dedupEntry, bool) {
	e, ok := d.ids[id]
	if ok && ttl > 0 && now-e.at >= int64(ttl) {
		return dedupEntry{}, false
	}
	return e, ok
}

// remember records that id was stored at queue q, offset off.
func (d *dedup) remember(id string, q int32, off int64, now int64, ttl time.Duration) {
	d.seq++
	d.ids[id] = dedupEntry{queue: q, offset: off, seq: d.seq, at: now}
	d.fifo = append(d.fifo, ringEntry{id: id, seq: d.seq, at: now})
	for len(d.fifo)-d.head > d.limit {
		d.pop()
	}
	if ttl > 0 {
		for d.head < len(d.fifo) && now-d.fifo[d.head].at >= int64(ttl) {
			d.pop()
		}
	}
	if d.head > 1024 && d.head > len(d.fifo)/2 {
		n := copy(d.fifo, d.fifo[d.head:])
		clear(d.fifo[n:])
		d.fifo, d.head = d.fifo[:n], 0
	}
}

// pop forgets the oldest id, unless it was remembered again since.
func (d *dedup) pop() {
	old := d.fifo[d.head]
	if e, ok := d.ids[old.id]; ok && e.seq == old.seq {
		delete(d.ids, old.id)
	}
	d.fifo[d.head] = ringEntry{}
	d.head++
}
