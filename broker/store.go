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
	// times counts how often each id was stored; copies is the number of
	// stores of an id stored before, twice the ids stored more than once.
	times  map[string]uint32
	copies int64
	twice  int64
	groups map[string]*group
	// backlog is the BACKLOG throttling state, changed by the throttler.
	backlog backlogState
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
		times:  map[string]uint32{},
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

// placement is where a message is stored: where it was stored now, or,
// for a duplicate, where the original was.
type placement struct {
	queue     int32
	offset    int64
	duplicate bool
}

// storeLocked stores each message of req whose entry in res is not
// refused, or, when req deduplicates, answers it as a duplicate when the
// dedup window remembers its id, and fills in its placement in res. A
// message goes to the queue req.queues asks for (valid: checked by the
// caller); when it asks for none (nil or -1), to the next queue in turn,
// one message after another, or, with req.oneQueue, every message of the
// request to the same queue, the next one in turn (apache.rocketmq.v2: a
// batch is stored on one queue, as the RocketMQ broker stores a
// SEND_BATCH_MESSAGE). The caller holds t.mu.
func (t *topic) storeLocked(req *sendRequest, res []entryResult, now time.Time, ttl time.Duration) (added, dups int64) {
	nowNano := now.UnixNano()
	batchQ := -1
	var copies int64
	for i, m := range req.msgs {
		r := &res[i]
		if r.refused != nil {
			continue
		}
		if !req.noDedup {
			if e, ok := t.dedup.lookup(m.MessageId, nowNano, ttl); ok {
				r.placement = placement{queue: e.queue, offset: e.offset, duplicate: true}
				dups++
				continue
			}
		}
		var q int
		switch {
		case req.queues != nil && req.queues[i] >= 0:
			q = int(req.queues[i])
		case req.oneQueue && batchQ >= 0:
			q = batchQ
		default:
			q = t.next
			if t.next++; t.next == len(t.queues) {
				t.next = 0
			}
			batchQ = q
		}
		off := int64(len(t.queues[q]))
		m.Topic = t.name // share one string per topic
		t.queues[q] = append(t.queues[q], m)
		t.dedup.remember(m.MessageId, int32(q), off, nowNano, ttl)
		switch n := t.times[m.MessageId]; n {
		case 0:
		case 1:
			t.twice++
			fallthrough
		default:
			copies++
		}
		t.times[m.MessageId]++
		r.placement = placement{queue: int32(q), offset: off}
		added++
	}
	t.stored += added
	t.copies += copies
	for _, g := range t.groups {
		g.backlog += added
	}
	return added, dups
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
