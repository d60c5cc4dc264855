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
// other async sends to the same endpoint and topic (WithBatching, on by
// default); the message keeps its own outcome, retries and callback, and
// its retries go alone. A FIFO message (MessageGroup) is never batched and
// is sent after the previous message of its group has its outcome, in the
// order of the SendAsync calls; it waits for its turn holding its slot.
func (p *Producer) SendAsync(ctx context.Context, m *Message, cb func(*SendReceipt, error)) error {
	return p.sendAsync(ctx, m, cb, true)
}

// TrySendAsync is SendAsync that never waits for room: when MaxInFlight
// async sends are in flight it fails at once with ErrBufferFull (as
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
	select {
	case p.async.slots <- struct{}{}:
	default:
		if !block {
			p.leave()
			return ErrBufferFull
		}
		select {
		case p.async.slots <- struct{}{}:
		case <-ctx.Done():
			p.leave()
			return ctx.Err()
		case <-p.closing:
			p.leave()
			return ErrClosed
		}
	}
	ctx, wm := p.startSend(ctx, m, true)
	j := asyncJob{ctx: ctx, m: m, wm: wm, cb: cb}
	if m.MessageGroup != "" {
		if _, now := p.fifo.take(m, &j); !now {
			return nil // parked in its ticket: the send before it submits it (fifo.go)
		}
	}
	p.async.submit(p, j)
	return nil
}

// runAsync runs one async send on a worker; it holds a slot.
func (p *Producer) runAsync(j asyncJob) {
	ctx := j.ctx
	var r *SendReceipt
	var se *SendError
	if j.t != nil {
		r, se = p.sendInTurn(ctx, j.m, j.wm, j.t, nil) // a FIFO message: never batched
	} else {
		r, se = p.send(ctx, j.m, j.wm, p.async.batch, nil)
	}
	p.core.leave()
	if se != nil {
		p.handOff(ctx, j.m, se)
		p.endSend(ctx, nil, se)
		if j.cb != nil {
			j.cb(nil, se)
		}
	} else {
		p.endSend(ctx, r, nil)
		if j.cb != nil {
			j.cb(r, nil)
		}
	}
	<-p.async.slots
	p.sends.leave()
}

// asyncJob is one accepted async send.
type asyncJob struct {
	ctx context.Context // the caller's, or the hook's from it
	m   *Message
	wm  *Message // what goes on the wire: m, or a copy with the hook's properties
	cb  func(*SendReceipt, error)
	t   *ticket // a FIFO message's place in its group; nil: none
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
	jobs    chan asyncJob // to an idle worker
	quit    chan struct{} // closed by stop: idle workers end
	workers atomic.Int64
	wg      sync.WaitGroup
	once    sync.Once
	batch   *batch.Batcher // first attempts join batches (WithBatching); nil: none
}

func (a *asyncPool) init(maxInFlight int) {
	a.slots = make(chan struct{}, maxInFlight)
	a.jobs = make(chan asyncJob)
	a.quit = make(chan struct{})
}

// submit hands j to an idle worker, or starts one. The caller holds a slot,
// so at most cap(slots) workers are busy; a worker that has just released
// its slot but not yet come back for the next send may make one more start,
// which ends when idle.
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
