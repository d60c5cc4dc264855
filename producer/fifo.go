package producer

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/rocketry-go/rocketry/producer/internal/send"
)

// This file holds the order of FIFO messages (Message.MessageGroup): the
// messages of one group of a topic are stored in the order they were sent,
// whatever the retries.
//
//   - Send and SendAsync take a ticket of the message's group before they
//     return (SendAsync: once it has a slot), so the tickets of a group are
//     in call order: SendAsync's order is the call order. A group's next
//     message starts only once the previous one's outcome is known, stored
//     or failed for good: a throttled message holds its group, and only its
//     group, through its backoff; a failure retried at once keeps its
//     place. A waiting async send holds a place in the FIFO queue
//     (MaxInFlight places) but no slot and no goroutine: the send before it
//     hands it to a worker at its turn, where it takes a slot. So a group
//     held up by a throttled message holds one slot, and the other groups
//     and messages keep the rest.
//   - A FIFO message is never batched (a cluster-mode proxy hashes the group
//     only for a request of one message), and every attempt goes to the
//     endpoint its group hashes to: a retry never moves to another broker.
//   - When a message of a group fails for good, the messages of the group
//     already waiting behind it (taken before its failure was reported to
//     its caller) fail in order without an attempt, each with a *SendError
//     wrapping ErrGroupFailed and the first failure; they go to the
//     dead-letter sink as any failed message. Sends made after the failure
//     was reported go on. So a group is never stored out of order, and never
//     with a gap the caller was not told of before sending more. The
//     official clients leave this to the caller: their FIFO send is one
//     request whose failure the caller sees before it sends the next message
//     (RocketMQ 4's DefaultMQProducerImpl.sendSelectImpl makes one attempt and
//     throws; rocketmq-clients' ProducerImpl retries on the group's one
//     queue, then fails the send), so a caller that sends one message at a
//     time stops at the first failure. Sending on would store the group with
//     a gap; a caller that wants to go on sends again after the error.
//
// A sync Send whose context ends while it waits for its turn fails at once
// (with its context's error, handed to the dead-letter sink): that failure
// is reported then, and the sends waiting behind it fail when their turn
// comes, as behind any failure.

// groupKey names a message group: groups are per topic.
type groupKey struct{ topic, group string }

// sequencer keeps the order of every message group that has a send in
// flight. It is safe for concurrent use.
type sequencer struct {
	mu    sync.Mutex
	lines map[groupKey]*groupLine // a group is here while one of its sends is
}

// groupLine is one group's sends in flight: the one sending (not kept
// here) and the tickets waiting behind it.
type groupLine struct {
	key   groupKey
	queue []*ticket // waiting, in call order
	// gen counts the failures of the group reported to their callers: a
	// ticket taken at gen g was taken before failure g was reported.
	gen uint64
	// failed is the failure that fails the tickets of gen <= failGen
	// behind it; nil: none.
	failed  *SendError
	failGen uint64
}

// ticket is one send's place in its group. Its fields are written under
// the sequencer's lock until its turn, and read by its send after.
type ticket struct {
	line  *groupLine
	ended bool // release ran (under the lock)
	gen   uint64
	turn  chan struct{} // closed at the ticket's turn; nil: its turn at once
	job   *asyncJob     // an async send parked (park): handed to a worker at its turn
	// first, set at the ticket's turn, is the group's failure that this
	// send fails behind (ErrGroupFailed); nil: the send goes.
	first *SendError
	// gaveUp is the failure of a sync send whose context ended before its
	// turn; gaveUpGen the line's gen when it was reported.
	gaveUp    *SendError
	gaveUpGen uint64
}

// take gives m (which has a group) its ticket; now reports whether it is
// the ticket's turn at once. A ticket that waits has a turn channel, closed
// at its turn; an async send then parks its job in it (park), once it
// holds a place in the FIFO queue.
func (s *sequencer) take(m *Message) (t *ticket, now bool) {
	k := groupKey{m.Topic, m.MessageGroup}
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lines[k]
	if l == nil {
		if s.lines == nil {
			s.lines = map[groupKey]*groupLine{}
		}
		l = &groupLine{key: k}
		s.lines[k] = l
		now = true
	}
	t = &ticket{line: l, gen: l.gen}
	if !now {
		t.turn = make(chan struct{})
		l.queue = append(l.queue, t)
	}
	return t, now
}

// park leaves j in its waiting ticket, for the send before it to hand to a
// worker at its turn; false when its turn has come already: the caller
// submits j itself.
func (s *sequencer) park(j *asyncJob) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-j.t.turn:
		return false
	default:
	}
	j.t.job = j
	return true
}

// cancel takes back the ticket of an async send that was refused (no room
// within its context, or TrySendAsync's ErrBufferFull) before it was
// accepted: a waiting ticket leaves its line, which the sends behind it
// never noticed; one whose turn it is hands the turn on. It returns the
// job to submit then, or nil.
func (s *sequencer) cancel(t *ticket) *asyncJob {
	s.mu.Lock()
	if t.turn != nil {
		select {
		case <-t.turn:
		default:
			l := t.line
			if i := slices.Index(l.queue, t); i >= 0 {
				l.queue = slices.Delete(l.queue, i, i+1)
			}
			s.mu.Unlock()
			return nil
		}
	}
	s.mu.Unlock()
	return s.release(t, nil)
}

// release ends t's turn with its send's error (nil: stored, or never
// accepted) and returns the parked job of the ticket whose turn it is now,
// for the caller to submit; nil when there is none (a sync send is woken
// by its turn channel). A genuine failure (not one behind another's) is
// reported now: the tickets taken until now fail behind it.
func (s *sequencer) release(t *ticket, se *SendError) *asyncJob {
	s.mu.Lock()
	defer s.mu.Unlock()
	t.ended = true
	l := t.line
	if se != nil && !se.Is(ErrGroupFailed) {
		l.fail(l.gen, se)
		l.gen++
	}
	for len(l.queue) > 0 {
		n := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		if n.gaveUp != nil {
			l.fail(n.gaveUpGen, n.gaveUp)
			continue
		}
		if l.failed != nil && n.gen <= l.failGen {
			n.first = l.failed
		}
		close(n.turn)
		return n.job
	}
	delete(s.lines, l.key)
	return nil
}

// giveUp takes a sync send whose context ended out of its line with its
// failure se, reported by the caller next; false when its turn came first.
func (s *sequencer) giveUp(t *ticket, se *SendError) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-t.turn:
		return false
	default:
	}
	l := t.line
	t.gaveUp, t.gaveUpGen = se, l.gen
	l.gen++
	return true
}

// abandon ends the ticket of a sync send that a panic unwound with its
// failure se, unless its turn already ended or it gave up: one still
// waiting gives up (the sends behind it fail at its turn), one at its turn
// hands it on. It returns the job to submit then, or nil.
func (s *sequencer) abandon(t *ticket, se *SendError) *asyncJob {
	s.mu.Lock()
	done := t.ended || t.gaveUp != nil
	s.mu.Unlock()
	if done || (t.turn != nil && s.giveUp(t, se)) {
		return nil
	}
	return s.release(t, se)
}

// fail records the failure se, reported at gen: it fails the tickets of
// gen <= gen behind it, unless an earlier failure in the line already fails
// them.
func (l *groupLine) fail(gen uint64, se *SendError) {
	if l.failed == nil || gen > l.failGen {
		l.failed, l.failGen = se, gen
	}
}

// awaitTurn waits for t's turn within ctx: nil at its turn, else the
// send's failure, handed to the dead-letter sink.
func (p *Producer) awaitTurn(ctx context.Context, m *Message, t *ticket) *SendError {
	if t.turn == nil {
		return nil
	}
	select {
	case <-t.turn:
		return nil
	case <-ctx.Done():
	case <-p.hardCtx.Done():
	}
	se := p.stoppedSend(ctx, m)
	if !p.fifo.giveUp(t, se) {
		return nil // its turn came: sendInTurn sees the context ended
	}
	p.putDeadLetter(m, se)
	return se
}

// sendInTurn sends m at its ticket's turn, without batching, and hands the
// turn to the next send of its group: it fails behind the group's failure
// (ErrGroupFailed), or without an attempt when its context has ended,
// else it runs as any send.
func (p *Producer) sendInTurn(ctx context.Context, m, wm *Message, t *ticket, pn *send.Pin) (*SendReceipt, *SendError) {
	var r *SendReceipt
	var se *SendError
	switch {
	case t.first != nil:
		cause := fmt.Errorf("message group %q: message %q failed first: %w", m.MessageGroup, t.first.MessageID, t.first)
		se = failedBefore(m.ID, ErrGroupFailed, nil, cause)
		p.putDeadLetter(m, se)
	case ctx.Err() != nil || p.hardCtx.Err() != nil:
		se = p.stoppedSend(ctx, m)
		p.putDeadLetter(m, se)
	default:
		r, se = p.send(ctx, m, wm, nil, pn)
	}
	if j := p.fifo.release(t, se); j != nil {
		p.async.submit(p, *j)
	}
	return r, se
}

// stoppedSend is the failure of a send stopped before any attempt: by
// Close (ErrClosed) or by ctx.
func (p *Producer) stoppedSend(ctx context.Context, m *Message) *SendError {
	if p.hardCtx.Err() != nil {
		return failedBefore(m.ID, ErrClosed, nil, nil)
	}
	return sendError(send.Stopped(ctx, m.ID, p.cfg.Closed))
}
