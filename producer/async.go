package producer

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rocketry-go/rocketry/producer/internal/batch"
)

// SendAsync starts sending m and returns at once. It returns nil when the
// send was accepted (m.ID is set by then): cb (if not nil) then runs exactly
// once, later, with the receipt or the error, exactly as Send would return
// them (retries and the dead-letter sink included). cb runs on one of the
// producer's worker goroutines, which holds one of the MaxInFlight slots
// until cb returns: cb must not block, and a panic in it crashes the program
// as in any goroutine.
//
// At most MaxInFlight async sends are in flight (WithMaxInFlight); when that
// many are, SendAsync waits for room within ctx. A non-nil error means the
// send was refused and cb never runs: ErrClosed, an error wrapping
// ErrInvalidMessage, or ctx's error when ctx had ended or ended before there
// was room. ctx also bounds the send itself, as Send's does.
//
// The first attempt of an async send may share one SendMessage call with
// other async sends to the same endpoint and topic (WithBatching: on by
// default over rocketry.v1, off unless given over RocketMQ5); the message keeps its own outcome, retries and callback, and
// its retries go alone. A FIFO message (MessageGroup) is never batched and
// is sent after the previous message of its group has its outcome, in the
// order of the SendAsync calls. It waits for its turn holding one of
// MaxInFlight places of the FIFO queue, not a slot, so that a group held up
// by a throttled message never takes the slots other groups need: at most
// MaxInFlight FIFO sends wait, besides the MaxInFlight in flight, and
// SendAsync waits for a place as it waits for a slot.
func (p *Producer) SendAsync(ctx context.Context, m *Message, cb func(*SendReceipt, error)) error {
	return p.sendAsync(ctx, m, cb, true)
}

// TrySendAsync is SendAsync that never waits for room: when MaxInFlight
// async sends are in flight (for a FIFO message: when MaxInFlight FIFO
// sends are waiting for their turn) it fails at once with ErrBufferFull (as
// franz-go's TryProduce). ctx bounds the send, as SendAsync's does.
func (p *Producer) TrySendAsync(ctx context.Context, m *Message, cb func(*SendReceipt, error)) error {
	return p.sendAsync(ctx, m, cb, false)
}

func (p *Producer) sendAsync(ctx context.Context, m *Message, cb func(*SendReceipt, error), block bool) error {
	if err := p.prepare(m); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !p.enter() {
		return ErrClosed
	}
	var t *ticket
	queued := false
	var err error
	if m.MessageGroup != "" {
		// A FIFO message takes its ticket first: one whose turn it is
		// takes a slot, one that waits a place in the FIFO queue, traded
		// for a slot at its turn (runAsync).
		t, _ = p.fifo.take(m)
		queued, err = p.async.fifoRoom(t.turn, ctx, p.closing, block)
	} else {
		err = p.async.room(p.async.slots, ctx, p.closing, block)
	}
	if err != nil {
		p.refused(t)
		return err
	}
	ctx, wm := p.startSendAsync(ctx, m, t, queued)
	j := &asyncJob{ctx: ctx, m: m, wm: wm, cb: cb, t: t, queued: queued}
	if t != nil && t.turn != nil {
		if ctx.Done() != nil {
			// Set before parking: the send before it may submit j at once.
			j.stop = context.AfterFunc(ctx, func() { p.giveUpParked(j) })
		}
		if p.fifo.park(j) {
			return nil // parked in its ticket: the send before it submits it (fifo.go)
		}
	}
	p.async.submit(p, *j)
	return nil
}

// giveUpParked ends a parked FIFO send whose context ended before its
// turn, as a sync send's awaitTurn does: it leaves its group's line (the
// sends behind it fail at its turn), fails without an attempt, goes to the
// dead-letter sink, and its callback runs now. Once its turn has come it
// does nothing: the send runs, and fails on its ended context.
func (p *Producer) giveUpParked(j *asyncJob) {
	se := p.stoppedSend(j.ctx, j.m)
	if !p.fifo.giveUp(j.t, se) {
		return
	}
	p.putDeadLetter(j.m, se)
	r, err := p.end(j.ctx, j.m, nil, se)
	if j.cb != nil {
		j.cb(r, err)
	}
	<-p.async.queued
	p.sends.leave()
}

// refused takes back what an async send that was not accepted holds: its
// FIFO ticket, if any, and its place among the sends in flight.
func (p *Producer) refused(t *ticket) {
	if t != nil {
		if j := p.fifo.cancel(t); j != nil {
			p.async.submit(p, *j)
		}
	}
	p.leave()
}

// startSendAsync is startSend for an async send that holds its room (a
// slot, or a place in the FIFO queue when queued): a panic in the hook's
// StartSend gives the room back before it unwinds SendAsync's caller.
func (p *Producer) startSendAsync(ctx context.Context, m *Message, t *ticket, queued bool) (context.Context, *Message) {
	started := false
	defer func() {
		if started {
			return
		}
		if queued {
			<-p.async.queued
		} else {
			<-p.async.slots
		}
		p.refused(t)
	}()
	ctx, wm := p.startSend(ctx, m, true)
	started = true
	return ctx, wm
}

// fifoRoom takes the room of a FIFO send whose ticket's turn channel is
// turn (nil: its turn now): a slot at its turn, else a place in the FIFO
// queue (queued), or a slot if its turn comes while it waits for a place,
// so that a send never waits for a place it no longer needs.
func (a *asyncPool) fifoRoom(turn chan struct{}, ctx context.Context, closing <-chan struct{}, block bool) (queued bool, err error) {
	if turn == nil {
		return false, a.room(a.slots, ctx, closing, block)
	}
	select {
	case a.queued <- struct{}{}:
		return true, nil
	case <-turn:
		return false, a.room(a.slots, ctx, closing, block)
	default:
	}
	if !block {
		return false, ErrBufferFull
	}
	select {
	case a.queued <- struct{}{}:
		return true, nil
	case <-turn:
		return false, a.room(a.slots, ctx, closing, block)
	case <-ctx.Done():
		return false, ctx.Err()
	case <-closing:
		return false, ErrClosed
	}
}

// room takes a token of room (a slot, or a place in the FIFO queue),
// waiting for one unless block is false (ErrBufferFull); the error is
// ctx's, or ErrClosed once the Producer closes.
func (a *asyncPool) room(room chan struct{}, ctx context.Context, closing <-chan struct{}, block bool) error {
	select {
	case room <- struct{}{}:
		return nil
	default:
	}
	if !block {
		return ErrBufferFull
	}
	select {
	case room <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-closing:
		return ErrClosed
	}
}

// runAsync runs one async send on a worker; it holds a slot, or, a FIFO
// message at its turn, a place in the FIFO queue that it trades for a slot
// first.
func (p *Producer) runAsync(j asyncJob) {
	if j.stop != nil {
		j.stop() // its turn came: giveUpParked would do nothing
	}
	slot := true
	if j.queued {
		slot = p.async.turnSlot(j.ctx, p.hardCtx)
	}
	ctx := j.ctx
	var r *SendReceipt
	var se *SendError
	if j.t != nil {
		r, se = p.sendInTurn(ctx, j.m, j.wm, j.t, nil) // a FIFO message: never batched
	} else {
		r, se = p.send(ctx, j.m, j.wm, p.async.batch, nil)
	}
	r, err := p.end(ctx, j.m, r, se)
	if j.cb != nil {
		j.cb(r, err)
	}
	if slot {
		<-p.async.slots
	}
	p.sends.leave()
}

// turnSlot trades a FIFO send's place in the queue for a slot, waiting for
// one; false when the send's ctx ended or the Producer was closed for good
// (hard) first, and the send goes on without one: it fails without an
// attempt (sendInTurn).
func (a *asyncPool) turnSlot(ctx, hard context.Context) bool {
	defer func() { <-a.queued }()
	select {
	case a.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	case <-hard.Done():
		return false
	}
}

// asyncJob is one accepted async send.
type asyncJob struct {
	ctx context.Context // the caller's, or the hook's from it
	m   *Message
	wm  *Message // what goes on the wire: m, or a copy with the hook's properties
	cb  func(*SendReceipt, error)
	t   *ticket // a FIFO message's place in its group; nil: none
	// stop unregisters giveUpParked from a parked send's context; nil: none.
	stop func() bool
	// queued says the send holds a place in the FIFO queue, not a slot: a
	// FIFO message that waited for its turn.
	queued bool
}

// workerIdle is how long an idle async worker waits for a send before it
// ends.
const workerIdle = 10 * time.Second

// asyncPool runs async sends on long-lived workers: a worker keeps its
// stack, grown once through gRPC's call path, from one send to the next,
// where a goroutine per send would grow a fresh one each time. Workers are
// started as sends need them, at most one per slot, and end after
// workerIdle without a send, or when the Producer closes.
type asyncPool struct {
	slots   chan struct{} // one token per async send in flight
	queued  chan struct{} // one token per FIFO async send not yet holding a slot
	jobs    chan asyncJob // to an idle worker
	quit    chan struct{} // closed by stop: idle workers end
	workers atomic.Int64
	wg      sync.WaitGroup
	once    sync.Once
	batch   *batch.Batcher // first attempts join batches (WithBatching); nil: none
}

func (a *asyncPool) init(maxInFlight int) {
	a.slots = make(chan struct{}, maxInFlight)
	a.queued = make(chan struct{}, maxInFlight)
	a.jobs = make(chan asyncJob)
	a.quit = make(chan struct{})
}

// submit hands j to an idle worker, or starts one. The caller holds a slot
// or a place in the FIFO queue, so at most cap(slots)+cap(queued) workers
// are busy; a worker that has just released its slot but not yet come back
// for the next send may make one more start, which ends when idle.
func (a *asyncPool) submit(p *Producer, j asyncJob) {
	select {
	case a.jobs <- j:
		return
	default:
	}
	a.workers.Add(1)
	a.wg.Add(1)
	go a.work(p, j)
}

func (a *asyncPool) work(p *Producer, j asyncJob) {
	defer a.wg.Done()
	defer a.workers.Add(-1)
	var idle *time.Timer
	for {
		p.runAsync(j)
		if idle == nil {
			idle = time.NewTimer(workerIdle)
		} else {
			idle.Reset(workerIdle)
		}
		select {
		case j = <-a.jobs:
		case <-idle.C:
			return
		case <-a.quit:
			idle.Stop()
			return
		}
	}
}

// stop ends the idle workers; wait says whether to wait for every worker
// to end (Close does, unless its context ended first).
func (a *asyncPool) stop(wait bool) {
	a.once.Do(func() { close(a.quit) })
	if a.batch != nil {
		a.batch.Close() // every send has ended: this waits for no RPC but the last ones'
	}
	if wait {
		a.wg.Wait()
	}
}

// closedBit marks a tracker once closed; the bits below it count the work
// in flight.
const closedBit = 1 << 62

// tracker counts work in flight and says when the last of it has left
// after close.
type tracker struct {
	n    atomic.Int64
	once sync.Once
	done chan struct{}
}

func (t *tracker) init() { t.done = make(chan struct{}) }

// enter counts one more; false once closed.
func (t *tracker) enter() bool {
	if t.n.Add(1)&closedBit != 0 {
		t.leave()
		return false
	}
	return true
}

func (t *tracker) leave() {
	if t.n.Add(-1) == closedBit {
		t.once.Do(func() { close(t.done) })
	}
}

// close refuses new work; done closes once nothing is in flight.
func (t *tracker) close() {
	if t.n.Or(closedBit)&^closedBit == 0 {
		t.once.Do(func() { close(t.done) })
	}
}
