package broker

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// popState is a consumer group's apache.rocketmq.v2 receive state on one
// topic, the broker's version of a RocketMQ broker's pop consumption: each
// message is received, stays invisible to the group for its invisible
// duration, and is acknowledged one by one. Per queue, the group's
// committed offset (group.committed, which the backlog counts from) is the
// ack frontier: every message before it is acknowledged. Guarded by the
// topic's mu.
type popState struct {
	// next is, per queue, the first offset the group has not looked at.
	next []int64
	// pending holds, per queue, the messages in [committed, next) not
	// acknowledged, by offset; a message in that range without an entry
	// is acknowledged (or skipped by the group's tag filter).
	pending []map[int64]*delivery
	// start is the queue a receive looks at first; it turns, so that
	// every queue gets its turn.
	start int
	// token numbers receipt handles, so that a handle names one delivery.
	token uint64
}

// delivery is one pending message of a group.
type delivery struct {
	// attempts counts its deliveries; 0 is a message held back because
	// an earlier message of its group is not acknowledged yet.
	attempts int32
	// visibleAt is when it may be delivered (again); zero: at once.
	visibleAt time.Time
	// token is its current receipt handle's.
	token uint64
}

func newPopState(committed []int64) *popState {
	p := &popState{next: slices.Clone(committed), pending: make([]map[int64]*delivery, len(committed))}
	for q := range p.pending {
		p.pending[q] = map[int64]*delivery{}
	}
	return p
}

// resetQueue starts queue q again at off, forgetting what was received:
// a rocketry.v1 commit or reset moved the group.
func (p *popState) resetQueue(q int, off int64) {
	p.next[q] = off
	clear(p.pending[q])
}

// popped is a message a receive delivers.
type popped struct {
	queue   int
	offset  int64
	msg     *rocketryv1.Message
	extra   *msgExtra
	attempt int32
	handle  string
}

// popLocked delivers up to n messages of t to g, each invisible to g for
// invisible from now: first, in each queue in offset order, messages whose
// invisible time is over (again, with attempt+1), then messages never
// delivered. A message with a message group is not delivered while an
// earlier message of its group in its queue is not acknowledged, so a
// group's messages are received in their queue's order, one at a time.
// Messages the filter does not match count as acknowledged. It returns
// the deliveries, how many were cold reads (l.cold), and how far the
// group's committed offsets moved forward. The caller holds t.mu, has
// promoted the due timed messages and made g.pop.
func (t *topic) popLocked(g *group, filter tagFilter, n int, invisible time.Duration, now time.Time, l *limits) (out []popped, cold, forward int64) {
	p := g.pop
	nq := len(t.queues)
	p.start = (p.start + 1) % nq
	for i := 0; i < nq && len(out) < n; i++ {
		q := (p.start + i) % nq
		log := t.queues[q]
		var blocked map[string]bool
		block := func(x *msgExtra) {
			if x != nil && x.group != "" {
				if blocked == nil {
					blocked = map[string]bool{}
				}
				blocked[x.group] = true
			}
		}
		isBlocked := func(x *msgExtra) bool { return x != nil && x.group != "" && blocked[x.group] }
		deliver := func(off int64, d *delivery, x *msgExtra) {
			d.attempts++
			d.visibleAt = now.Add(invisible)
			p.token++
			d.token = p.token
			if l.cold(len(log), off) {
				cold++
			}
			out = append(out, popped{queue: q, offset: off, msg: log[off], extra: x, attempt: d.attempts,
				handle: encodeHandle(q, off, d.token, d.visibleAt)})
			block(x)
		}
		pend := p.pending[q]
		offs := make([]int64, 0, len(pend))
		for off := range pend {
			offs = append(offs, off)
		}
		slices.Sort(offs)
		for _, off := range offs {
			if len(out) == n {
				break
			}
			d, x := pend[off], t.extras[q][off]
			switch {
			case now.Before(d.visibleAt):
				block(x) // in flight
			case isBlocked(x):
			case d.attempts == 0 && !filter.match(log[off].GetTag()):
				delete(pend, off)
			default:
				deliver(off, d, x)
			}
		}
		for len(out) < n && p.next[q] < int64(len(log)) {
			off := p.next[q]
			p.next[q]++
			x := t.extras[q][off]
			if !filter.match(log[off].GetTag()) {
				continue
			}
			d := &delivery{}
			pend[off] = d
			if !isBlocked(x) {
				deliver(off, d, x)
			}
		}
		forward += t.advanceLocked(g, q)
	}
	return out, cold, forward
}

// advanceLocked moves g's committed offset of queue q past the messages
// acknowledged, and returns how far it moved.
func (t *topic) advanceLocked(g *group, q int) int64 {
	p := g.pop
	off := g.committed[q]
	for off < p.next[q] && p.pending[q][off] == nil {
		off++
	}
	if off == g.committed[q] {
		return 0
	}
	return t.moveLocked(g, q, off)
}

// nextVisibleLocked is the earliest time after now when a message of t may
// become receivable by g without a new send: a pending message's invisible
// time ends, or a timed message is due. Zero when there is none.
func (t *topic) nextVisibleLocked(g *group, now time.Time) time.Time {
	var at time.Time
	earlier := func(x time.Time) {
		if x.After(now) && (at.IsZero() || x.Before(at)) {
			at = x
		}
	}
	if len(t.timed) > 0 {
		earlier(t.timed[0].at)
	}
	for _, pend := range g.pop.pending {
		for _, d := range pend {
			earlier(d.visibleAt)
		}
	}
	return at
}

// receiptHandle is a decoded receipt handle: the delivery of the message
// at offset of queue, numbered token, invisible until visibleAt.
type receiptHandle struct {
	queue     int
	offset    int64
	token     uint64
	visibleAt time.Time
}

// encodeHandle is a receipt handle: "queue_offset_token_visibleUnixMilli".
func encodeHandle(q int, off int64, token uint64, visibleAt time.Time) string {
	return fmt.Sprintf("%d_%d_%d_%d", q, off, token, visibleAt.UnixMilli())
}

func decodeHandle(s string) (receiptHandle, error) {
	parts := strings.Split(s, "_")
	if len(parts) != 4 {
		return receiptHandle{}, fmt.Errorf("receipt handle %s is not one this broker made", quote(s))
	}
	var n [4]int64
	for i, p := range parts {
		v, err := strconv.ParseInt(p, 10, 64)
		if err != nil || v < 0 {
			return receiptHandle{}, fmt.Errorf("receipt handle %s is not one this broker made", quote(s))
		}
		n[i] = v
	}
	return receiptHandle{queue: int(n[0]), offset: n[1], token: uint64(n[2]), visibleAt: time.UnixMilli(n[3])}, nil
}

// handleProblem says why h cannot acknowledge or change a message of g at
// now, or "". A handle is expired once its invisible time is over, as the
// proxy's ReceiptHandle.isExpired says (see
// proxy/src/main/java/org/apache/rocketmq/proxy/processor/AbstractProcessor.java),
// and stale once the message was received again or its invisible time
// changed, which gave it a new handle. done reports a handle of a message
// acknowledged already, which acknowledges again without error.
func (t *topic) handleProblem(g *group, h receiptHandle, now time.Time) (d *delivery, done bool, problem string) {
	switch {
	case !now.Before(h.visibleAt):
		return nil, false, "receipt handle is expired"
	case h.queue >= len(t.queues) || g == nil || g.pop == nil || h.offset >= g.pop.next[h.queue]:
		return nil, false, "receipt handle names no message this group received"
	}
	d = g.pop.pending[h.queue][h.offset]
	switch {
	case d == nil:
		return nil, true, ""
	case d.token != h.token:
		return nil, false, "receipt handle is stale: the message was received again or its invisible time changed since"
	}
	return d, false, ""
}

// tagFilter is a TAG filter expression: "*" (or empty) matches every
// message, else tags joined by "||".
type tagFilter []string

func parseTagFilter(expr string) tagFilter {
	expr = strings.TrimSpace(expr)
	if expr == "" || expr == "*" {
		return nil
	}
	var f tagFilter
	for _, tag := range strings.Split(expr, "||") {
		if tag = strings.TrimSpace(tag); tag != "" {
			f = append(f, tag)
		}
	}
	return f
}

func (f tagFilter) match(tag string) bool {
	return f == nil || slices.Contains(f, tag)
}
