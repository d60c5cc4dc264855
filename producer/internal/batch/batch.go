// Package batch gathers the first attempts of async sends into batches,
// one SendMessage each, and hands each message its own answer back. It
// knows neither wire protocol: an entry's message, and what the broker
// answered of it, are its protocol's payload (M), and the answer's outcome
// is the producer's (O); each protocol's Sender makes the call and reads
// its answer.
//
// The rules, which the producer's WithBatching promises:
//   - A batch is sent when it holds Config.MaxMessages messages or
//     Config.MaxBytes bytes, when Config.Linger has passed since its first
//     message, or as soon as every async send in flight is waiting in a
//     batch or on the wire, since no other message can then join it before
//     one of those is answered (the Nagle rule: a lone message does not
//     wait for company that cannot come). As franz-go's producer, the
//     Batcher holds no goroutine while idle: the linger is a
//     time.AfterFunc, and a full batch is sent by a goroutine that lives as
//     long as its RPC.
//   - The RPC's deadline is the earliest deadline of its entries' attempts;
//     it ends early when the Batcher's hard context ends (the Producer's
//     Close gives up waiting), or when every entry has left.
//   - Each entry gets its own answer, except when the answer refuses a
//     request of several messages for good without naming a message
//     (Split, the one place that decides it): each entry is then sent again
//     alone by its owner, within the same attempt.
//   - An entry whose context ends while it waits leaves at once, and the
//     batch goes on for the others: before the batch is sent its message is
//     taken out (known not stored); once sent, it leaves as soon as the
//     request is encoded (MarkEncoded), so that the caller may change its
//     message once its send is over.
package batch

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Config is how batches are made; a Linger of 0 is no batching.
type Config struct {
	Linger      time.Duration // how long a batch waits for more messages after its first one
	MaxMessages int           // the most messages of a batch
	MaxBytes    int           // the most bytes of a batch (as Entry.Size counts them)
}

// Key names the open batch of a destination and a topic. To is where the
// batch goes, as its protocol names it (a connection, a broker's address);
// it must be comparable. Two protocols' destinations are of different
// types, so their keys never meet. Props is what else the messages of one
// batch must share, as their protocol encodes it (apache.rocketmq.v2: the
// properties a proxy stores with a whole batch); "" for nothing, or for
// the protocol's own empty value.
type Key struct {
	To    any
	Topic string
	Props string
}

// Batcher gathers entries into batches. It is safe for concurrent use; a
// nil Batcher is no batching.
type Batcher struct {
	cfg   Config
	slots chan struct{}   // the async pool's: len is the async sends in flight
	hard  context.Context // every RPC ends with it

	mu      sync.Mutex
	open    map[Key]group // written under mu: the batches gathering entries
	pending int           // written under mu: entries in open batches
	sending int           // written under mu: entries in batches sent and not yet answered
	closed  bool          // written under mu by Close: no more batches; entries go alone
	wg      sync.WaitGroup
}

// New returns the Batcher of an async pool whose in-flight slots are
// slots, its RPCs ending with hard, or nil when cfg is no batching. A batch
// holds at most a quarter of the async sends in flight (and at most
// cfg.MaxMessages), so that while one batch is on the wire the next ones
// gather, and the callbacks of one run during the RPC of another
// (measured: at MaxInFlight 64, batches of 16 send about 1.6 times as many
// messages a second as batches of 64); below 2 messages a batch
// (MaxInFlight < 8) there is no batching.
func New(cfg Config, slots chan struct{}, hard context.Context) *Batcher {
	cfg.MaxMessages = min(cfg.MaxMessages, cap(slots)/4)
	if cfg.Linger <= 0 || cfg.MaxMessages < 2 {
		return nil
	}
	return &Batcher{cfg: cfg, slots: slots, hard: hard, open: map[Key]group{}}
}

// MaxMessages is the most messages of one of its batches.
func (bt *Batcher) MaxMessages() int { return bt.cfg.MaxMessages }

// Waiting is the entries in open batches and the entries in batches sent
// and not yet answered: what the producer's tests wait for instead of
// sleeping until their sends have joined a batch, or their batch is on the
// wire.
func (bt *Batcher) Waiting() (pending, sending int) {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	return bt.pending, bt.sending
}

// A Sender sends a batch in one request over its protocol and answers each
// of its entries (Batch.Answer, Batch.FailAll) before it returns. It runs
// on the batch's goroutine; it calls MarkEncoded once the request is
// encoded, or its call is over.
type Sender[M, O any] interface {
	SendBatch(ctx context.Context, b *Batch[M, O])
}

// Answer is what a batch answered one entry.
type Answer[O any] struct {
	Outcome O    // the entry's outcome, unless Split
	Unsent  bool // the request never left the client: the message is known not stored
	Split   bool // the batch's answer says nothing of this message: send it alone
}

// Entry is one message in a batch.
type Entry[M, O any] struct {
	// Msg is the protocol's payload: its message, written by the entry's
	// owner before Join and read by the batch's goroutine (its Sender)
	// until the request is encoded, and the fields the Sender answers into,
	// written by the batch's goroutine before done closes and read by the
	// owner once Wait returns answered. The protocol's type names the
	// writer of each of its fields.
	Msg M
	// Size is what the message counts towards a batch's bytes; written by
	// the owner before Join.
	Size int
	// Deadline is when the entry's attempt ends (zero: never); written by
	// the owner before Join, read under the Batcher's mu.
	Deadline time.Time

	answer Answer[O]    // written by the batch's goroutine (Answer, FailAll) before done closes; read by the owner after
	b      *Batch[M, O] // written by Join under mu, before the entry is in a batch; read by the owner after
}

// Batch is one batch: open (gathering entries), then started (its entries
// fixed, being sent), then done.
//
// Writers: Join makes a batch under the Batcher's mu, and every field but
// the channels is written under mu from then on, by whichever goroutine
// holds it (an entry's owner in Join or leave, a linger, the batch's
// goroutine in flush); once started, its entries are fixed, and the
// batch's goroutine (flush, its Sender) reads them without the lock.
type Batch[M, O any] struct {
	key      Key                // written by Join, at creation
	s        Sender[M, O]       // written by Join, at creation
	entries  []*Entry[M, O]     // written under mu until started (Join, leave); fixed after
	bytes    int                // written under mu (Join, leave)
	timer    *time.Timer        // written by Join, at creation: the linger; stopped under mu
	started  bool               // written under mu by startLocked
	deadline time.Time          // written under mu by startLocked: the earliest of the entries'
	waiting  int                // written under mu (Join, leave): entries that have not left
	cancel   context.CancelFunc // written under mu by flush, before its call; called by flush, or by the last entry to leave
	once     sync.Once
	encoded  chan struct{} // closed once (MarkEncoded) when the request is encoded, or its call is over
	done     chan struct{} // closed by the batch's goroutine (flush) once every entry has its answer, or by the last entry to leave an unsent batch
}

// group is what the Batcher sees of an open Batch, whatever its payload.
type group interface {
	startLocked(bt *Batcher)
	flush(bt *Batcher)
}

// Entries are the batch's messages, in the order of the request. Once the
// batch is started (as its Sender sees it) they are fixed.
func (b *Batch[M, O]) Entries() []*Entry[M, O] { return b.entries }

// MarkEncoded says the request has been encoded: the batch reads its
// entries' messages no more.
func (b *Batch[M, O]) MarkEncoded() { b.once.Do(func() { close(b.encoded) }) }

// Join adds e to the open batch of key, which s sends; false when e must go
// alone (the Batcher is closed, or e is too big to share a batch).
func Join[M, O any](bt *Batcher, key Key, s Sender[M, O], e *Entry[M, O]) bool {
	if e.Size >= bt.cfg.MaxBytes {
		return false
	}
	var start []group
	bt.mu.Lock()
	if bt.closed {
		bt.mu.Unlock()
		return false
	}
	b, _ := bt.open[key].(*Batch[M, O])
	if b != nil && b.bytes+e.Size > bt.cfg.MaxBytes {
		b.startLocked(bt)
		start = append(start, b)
		b = nil
	}
	if b == nil {
		b = &Batch[M, O]{key: key, s: s, encoded: make(chan struct{}), done: make(chan struct{})}
		bt.open[key] = b
		bt.wg.Add(1) // the linger's; lingered or a Stop releases it
		b.timer = time.AfterFunc(bt.cfg.Linger, func() { b.lingered(bt) })
	}
	e.b = b
	b.entries = append(b.entries, e)
	b.bytes += e.Size
	b.waiting++
	bt.pending++
	switch {
	case len(b.entries) >= bt.cfg.MaxMessages || b.bytes >= bt.cfg.MaxBytes:
		b.startLocked(bt)
		start = append(start, b)
	case bt.pending+bt.sending >= len(bt.slots):
		// Every async send in flight is here: nobody else can join.
		for _, o := range bt.open {
			o.startLocked(bt)
			start = append(start, o)
		}
	}
	bt.wg.Add(len(start))
	bt.mu.Unlock()
	for _, sb := range start {
		go func() {
			defer bt.wg.Done()
			sb.flush(bt)
		}()
	}
	return true
}

// startLocked fixes b's entries and takes it out of the open batches; the
// caller sends it. Called with mu held.
func (b *Batch[M, O]) startLocked(bt *Batcher) {
	if bt.open[b.key] == group(b) {
		delete(bt.open, b.key)
	}
	b.started = true
	if b.timer.Stop() {
		bt.wg.Done() // the linger will not run
	}
	bt.pending -= len(b.entries)
	bt.sending += len(b.entries)
	for _, e := range b.entries {
		if !e.Deadline.IsZero() && (b.deadline.IsZero() || e.Deadline.Before(b.deadline)) {
			b.deadline = e.Deadline
		}
	}
}

// lingered sends b when its linger has passed, unless it was sent or
// emptied before.
func (b *Batch[M, O]) lingered(bt *Batcher) {
	defer bt.wg.Done()
	bt.mu.Lock()
	if b.started {
		bt.mu.Unlock()
		return
	}
	b.startLocked(bt)
	bt.mu.Unlock()
	b.flush(bt)
}

// flush sends a started batch and answers its entries.
func (b *Batch[M, O]) flush(bt *Batcher) {
	var ctx context.Context
	var cancel context.CancelFunc
	if b.deadline.IsZero() {
		ctx, cancel = context.WithCancel(bt.hard)
	} else {
		ctx, cancel = context.WithDeadline(bt.hard, b.deadline)
	}
	bt.mu.Lock()
	b.cancel = cancel
	if b.waiting == 0 {
		cancel() // everyone left before it was sent
	}
	bt.mu.Unlock()
	b.s.SendBatch(ctx, b)
	b.MarkEncoded()
	cancel()
	bt.mu.Lock()
	bt.sending -= len(b.entries)
	bt.mu.Unlock()
	close(b.done)
}

// leave takes e out of its batch when its context ended before the
// batch's answer: out of the batch when not sent yet (unsent: its message
// is known not stored), else once the request is encoded.
func leave[M, O any](bt *Batcher, e *Entry[M, O]) (unsent bool) {
	b := e.b
	bt.mu.Lock()
	if !b.started {
		i := slices.Index(b.entries, e)
		b.entries = slices.Delete(b.entries, i, i+1)
		b.bytes -= e.Size
		b.waiting--
		bt.pending--
		if len(b.entries) == 0 {
			b.startLocked(bt) // nothing to send: its linger is stopped
			close(b.done)
		}
		bt.mu.Unlock()
		return true
	}
	b.waiting--
	if b.waiting == 0 && b.cancel != nil {
		b.cancel()
	}
	bt.mu.Unlock()
	<-b.encoded
	return false
}

// Close sends the open batches (there are none once every send has ended)
// and waits for every batch in flight; later entries go alone.
func (bt *Batcher) Close() {
	bt.mu.Lock()
	bt.closed = true
	var start []group
	for _, b := range bt.open {
		b.startLocked(bt)
		start = append(start, b)
	}
	bt.mu.Unlock()
	for _, b := range start {
		b.flush(bt)
	}
	bt.wg.Wait()
}

// Wait blocks until e's batch has answered it (answered true, with its
// answer), or ctx has ended and e has left its batch: a.Unsent then says
// whether its message was taken out before the batch was sent (known not
// stored), and the outcome is the caller's to make of ctx's end.
func Wait[M, O any](ctx context.Context, bt *Batcher, e *Entry[M, O]) (a Answer[O], answered bool) {
	select {
	case <-e.b.done:
		return e.answer, true
	case <-ctx.Done():
	}
	select {
	case <-e.b.done:
		return e.answer, true
	default:
	}
	return Answer[O]{Unsent: leave(bt, e)}, false
}
