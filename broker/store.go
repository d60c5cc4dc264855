package broker

import (
	"container/heap"
	"sync"
	"time"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// topic is one topic: its queues, its dedup window and its consumer groups.
// Every field below mu is guarded by mu.
type topic struct {
	name string
	typ  TopicType // set at creation

	mu     sync.Mutex
	queues [][]*rocketryv1.Message // the log of each queue; offset = index
	// extras holds, per queue, the msgExtra of each message that has one,
	// by offset; a queue's map is made on its first such message.
	extras []map[int64]*msgExtra
	// timed holds the messages whose delivery time is still to come; each
	// joins its queue when due (promoteLocked), as a RocketMQ broker keeps
	// them in its timer wheel until then.
	timed    timedHeap
	timedSeq uint64
	next     int   // the queue of the next new message (round-robin)
	stored   int64 // messages in the queues (not the timed ones)
	dedup    dedup
	// times counts how often each id was stored; copies is the number of
	// stores of an id stored before, twice the ids stored more than once.
	times  map[string]uint32
	copies int64
	twice  int64
	groups map[string]*group
	// wake, made by the first receiver that waits (wakeLocked), is closed
	// and dropped when a waiting receiver may find something new: a
	// message joined a queue, a message was acknowledged or made visible
	// (notifyLocked). nil while nobody waits.
	wake chan struct{}
	// backlog is the BACKLOG throttling state, changed by the throttler.
	backlog backlogState
	// half holds the open transactions' half messages by transaction id,
	// invisible until committed (rocketmq_tx.go); nil until the first.
	half map[string]*halfTx
}

// group is a consumer group's committed offsets on one topic.
type group struct {
	committed []int64 // per queue: the offset of the next message to read
	backlog   int64   // sum over queues of (head - committed)
	// pop is the state of apache.rocketmq.v2 receives (rocketmq_consumer.go);
	// nil until the group's first one.
	pop *popState
}

func newTopic(name string, queues int, dedupCount int) *topic {
	return &topic{
		name:   name,
		queues: make([][]*rocketryv1.Message, queues),
		extras: make([]map[int64]*msgExtra, queues),
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
// far forward it moved (negative when backward). The group's
// apache.rocketmq.v2 receives start again from there.
func (t *topic) commitLocked(g *group, q int, off int64) int64 {
	if g.pop != nil {
		g.pop.resetQueue(q, off)
	}
	return t.moveLocked(g, q, off)
}

// moveLocked moves g's committed offset of queue q to off, as commitLocked
// does, without touching its receive state.
func (t *topic) moveLocked(g *group, q int, off int64) int64 {
	d := off - g.committed[q]
	g.committed[q] = off
	g.backlog -= d
	return d
}

// notifyLocked wakes the receivers waiting on the topic.
func (t *topic) notifyLocked() {
	if t.wake != nil {
		close(t.wake)
		t.wake = nil
	}
}

// wakeLocked is the channel notifyLocked closes next.
func (t *topic) wakeLocked() <-chan struct{} {
	if t.wake == nil {
		t.wake = make(chan struct{})
	}
	return t.wake
}

// appendLocked appends m, with its extra x (or nil), to queue q and
// returns its offset.
func (t *topic) appendLocked(q int, m *rocketryv1.Message, x *msgExtra) int64 {
	off := int64(len(t.queues[q]))
	m.Topic = t.name // share one string per topic
	t.queues[q] = append(t.queues[q], m)
	if x != nil {
		if t.extras[q] == nil {
			t.extras[q] = map[int64]*msgExtra{}
		}
		t.extras[q][off] = x
	}
	return off
}

// promoteLocked moves the timed messages due at now into their queues, in
// the order they are due, and returns how many it moved.
func (t *topic) promoteLocked(now time.Time) int64 {
	var n int64
	for len(t.timed) > 0 && !t.timed[0].at.After(now) {
		e := heap.Pop(&t.timed).(timedMessage)
		off := t.appendLocked(e.queue, e.msg, e.extra)
		if d, ok := t.dedup.ids[e.msg.MessageId]; ok && d.offset < 0 && d.queue == int32(e.queue) {
			d.offset = off
			t.dedup.ids[e.msg.MessageId] = d
		}
		n++
	}
	if n > 0 {
		t.stored += n
		for _, g := range t.groups {
			g.backlog += n
		}
		t.notifyLocked()
	}
	return n
}

// placement is where a message is stored: where it was stored now, or,
// for a duplicate, where the original was. A timed message not due yet
// has offset -1 until it joins its queue.
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
// SEND_BATCH_MESSAGE). req.extras holds each message's msgExtra (nil, or
// as long as msgs); a message whose delivery time is after now waits in
// the topic's timer until then. Timed messages due by now join their
// queues first. The caller holds t.mu.
func (t *topic) storeLocked(req *sendRequest, res []entryResult, now time.Time, ttl time.Duration) (added, dups int64) {
	t.promoteLocked(now)
	nowNano := now.UnixNano()
	batchQ := -1
	var copies, inQueues int64
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
		var x *msgExtra
		if req.extras != nil {
			x = req.extras[i]
		}
		if req.tx != nil { // a half message: invisible until committed (rocketmq_tx.go)
			t.holdLocked(req.tx, q, m, x, now)
			r.placement = placement{queue: int32(q), offset: -1}
			continue
		}
		off, inQueue, copied := t.placeLocked(q, m, x, now, ttl)
		if inQueue {
			inQueues++
		}
		if copied {
			copies++
		}
		r.placement = placement{queue: int32(q), offset: off}
		added++
	}
	t.stored += inQueues
	t.copies += copies
	for _, g := range t.groups {
		g.backlog += inQueues
	}
	if inQueues > 0 {
		t.notifyLocked()
	}
	return added, dups
}

// placeLocked puts m in queue q, or in the timer when its delivery time is
// after now, and remembers its id; it returns its offset (-1 in the
// timer), whether it joined its queue, and whether it is a copy of an id
// stored before. The caller counts it in t.stored, t.copies and the
// groups' backlogs, and notifies the receivers.
func (t *topic) placeLocked(q int, m *rocketryv1.Message, x *msgExtra, now time.Time, ttl time.Duration) (off int64, inQueue, copied bool) {
	off = -1
	if x != nil && x.deliverAt.After(now) {
		m.Topic = t.name
		t.timedSeq++
		heap.Push(&t.timed, timedMessage{at: x.deliverAt, seq: t.timedSeq, queue: q, msg: m, extra: x})
	} else {
		off = t.appendLocked(q, m, x)
		inQueue = true
	}
	t.dedup.remember(m.MessageId, int32(q), off, now.UnixNano(), ttl)
	switch n := t.times[m.MessageId]; n {
	case 0:
	case 1:
		t.twice++
		copied = true
	default:
		copied = true
	}
	t.times[m.MessageId]++
	return off, inQueue, copied
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
