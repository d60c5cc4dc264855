package producer

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rocketry-go/rocketry/brokercode"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/apache/rocketmq/v2"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers protoCodec
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// This file holds the batcher of async sends (WithBatching). SendMessage
// carries several messages and answers each one, on both protocols, so
// async sends to the same endpoint and topic share one RPC:
//
//   - Batching is a property of a send's first attempt only, made inside its
//     attempter: the first attempt of an async send joins the open batch of
//     its (endpoint, topic), instead of sending its message alone, and
//     blocks until the batch's answer for its own entry comes back. Every
//     later attempt goes alone, exactly as a sync Send's. The executor sees
//     one attempt with one outcome, and stays the only owner of the send's
//     state and decisions: each message keeps its ID, attempts, retries,
//     events and callback, and only the entries that failed are retried,
//     each by its own outcome.
//   - A batch is sent when it holds maxMessages messages or maxBytes bytes,
//     when the linger has passed since its first message, or as soon as
//     every async send in flight is waiting in a batch or on the wire, since
//     no other message can then join it before one of those is answered
//     (the Nagle rule: a lone message does not wait for company that cannot
//     come). As franz-go's producer, the batcher holds no goroutine while
//     idle: the linger is a time.AfterFunc, and a full batch is sent by a
//     goroutine that lives as long as its RPC.
//   - The RPC's deadline is the earliest deadline of its entries' attempts,
//     without gRPC's wait-for-ready; it ends early when the Producer's Close
//     gives up waiting, or when every entry has left.
//   - Each entry gets its own outcome: on apache.rocketmq.v2 from its own
//     status, or from the one entry a RocketMQ 5 proxy answers for a whole
//     batch, which is every message's (classifyEntries); on rocketry.v1
//     from its own result when the
//     call succeeded, or the call's classified status when it failed, the
//     same for every entry.
//   - Except one case: a Permanent answer (4xx) to a whole request of
//     several messages says nothing about which message was bad: on
//     rocketry.v1 (which refuses a request whole when one message is
//     invalid), as a gRPC status (a request over the server's size limit),
//     or on apache.rocketmq.v2 as a request status that no entry has of its
//     own, or that every entry repeats (a request over the broker's batch
//     limit; see refusedWhole). Each
//     entry is then sent again alone, within the same attempt, its answer
//     the attempt's outcome; as Kafka's producer splits a batch refused as
//     too large without counting a retry. The send's attempts, failure
//     schedule, retry budget and endpoint are untouched, so a good message
//     is never failed, nor its retries spent, by a bad neighbour; the only
//     cost is the batch's round trip, within the attempt's timeout. (404
//     TOPIC_NOT_FOUND is the exception's exception: a batch has one topic,
//     so it is true of every entry.)
//   - An entry whose context ends while it waits leaves at once with an
//     unknown outcome, and the batch goes on for the others: before the
//     batch is sent its message is taken out (known not stored); once sent,
//     it leaves as soon as the request is encoded, so that the caller may
//     change its Message once its send is over. (The encoding is seen
//     through batchCodec, the proto codec given with grpc.ForceCodecV2,
//     an API gRPC marks experimental.)
//
// The batcher costs a sync Send nothing: Send never batches.

// Defaults of WithBatching.
const (
	// DefaultBatchLinger is how long a batch waits for more messages after
	// its first one.
	DefaultBatchLinger = 500 * time.Microsecond
	// DefaultBatchMessages is the most messages of a batch: the bundled
	// broker's default limit of one request (broker.DefaultMaxBatch).
	DefaultBatchMessages = 128
	// DefaultBatchBytes is the most bytes of a batch (bodies, IDs, topic,
	// tag, keys and properties), as franz-go's default batch size: well
	// under gRPC's default 4 MiB limit of a request.
	DefaultBatchBytes = 1 << 20
)

// maxBatchLinger is the longest linger WithBatching accepts.
const maxBatchLinger = time.Second

// batchConfig is WithBatching's; a linger of 0 is no batching.
type batchConfig struct {
	linger      time.Duration
	maxMessages int
	maxBytes    int
}

var defaultBatchConfig = batchConfig{linger: DefaultBatchLinger, maxMessages: DefaultBatchMessages, maxBytes: DefaultBatchBytes}

// batchKey names the open batch of an endpoint and a topic: for rocketry.v1
// the endpoint, for apache.rocketmq.v2 the broker's address.
type batchKey struct {
	ep    *endpoint
	addr  string
	topic string
}

// batcher gathers the first attempts of async sends into batches. It is
// safe for concurrent use.
type batcher struct {
	cfg   batchConfig
	slots chan struct{}   // the async pool's: len is the async sends in flight
	hard  context.Context // the Producer's: every RPC ends with it

	mu      sync.Mutex
	open    map[batchKey]*batch
	pending int  // entries in open batches
	sending int  // entries in batches sent and not yet answered
	closed  bool // Close: no more batches; sends go alone
	wg      sync.WaitGroup
}

// newBatcher returns the batcher of an async pool whose in-flight slots are
// slots, or nil when cfg is no batching. A batch holds at most a quarter of
// the async sends in flight (and at most cfg.maxMessages), so that while
// one batch is on the wire the next ones gather, and the callbacks of one
// run during the RPC of another (measured: at MaxInFlight 64, batches of 16
// send about 1.6 times as many messages a second as batches of 64); below
// 2 messages a batch (MaxInFlight < 8) there is no batching.
func newBatcher(cfg batchConfig, slots chan struct{}, hard context.Context) *batcher {
	cfg.maxMessages = min(cfg.maxMessages, cap(slots)/4)
	if cfg.linger <= 0 || cfg.maxMessages < 2 {
		return nil
	}
	return &batcher{cfg: cfg, slots: slots, hard: hard, open: map[batchKey]*batch{}}
}

// batchSender sends a batch in one SendMessage over its protocol and
// answers each of its entries (o, unsent or split, and the result).
type batchSender interface {
	sendBatch(ctx context.Context, b *batch)
}

// batch is one batch: open (gathering entries), then started (its entries
// fixed, being sent), then done.
type batch struct {
	key      batchKey
	s        batchSender
	entries  []*batchEntry
	bytes    int
	timer    *time.Timer // the linger
	started  bool
	deadline time.Time          // the earliest of the entries', set when started
	waiting  int                // entries that have not left
	cancel   context.CancelFunc // the RPC's, once it is made
	once     sync.Once
	encoded  chan struct{} // closed once the request is encoded, or its call is over
	done     chan struct{} // closed once every entry has its answer
}

// markEncoded says the request has been encoded: the batch reads its
// entries' messages no more.
func (b *batch) markEncoded() { b.once.Do(func() { close(b.encoded) }) }

// batchEntry is one message in a batch. The owner writes the message before
// join; the batch writes the answer before done closes.
type batchEntry struct {
	bt       *batcher // to join at the first attempt; nil after it
	size     int
	deadline time.Time
	id       string // the message's ID
	b        *batch

	v1 *rocketryv1.Message
	v2 *rocketmqv2.Message

	o      Outcome
	unsent bool
	split  bool                      // the batch's answer says nothing of this message: send it alone
	v1res  [1]*rocketryv1.SendResult // the response's Results of one message
	v2res  *rocketmqv2.SendResultEntry
	queue  int32 // apache.rocketmq.v2: the queue of the batch
}

// join adds e to the open batch of key, which s sends; false when e must
// go alone (the batcher is closed, or e is too big to share a batch).
func (bt *batcher) join(key batchKey, s batchSender, e *batchEntry) bool {
	if e.size >= bt.cfg.maxBytes {
		return false
	}
	var start []*batch
	bt.mu.Lock()
	if bt.closed {
		bt.mu.Unlock()
		return false
	}
	b := bt.open[key]
	if b != nil && b.bytes+e.size > bt.cfg.maxBytes {
		bt.startLocked(b)
		start = append(start, b)
		b = nil
	}
	if b == nil {
		b = &batch{key: key, s: s, encoded: make(chan struct{}), done: make(chan struct{})}
		bt.open[key] = b
		bt.wg.Add(1) // the linger's; lingered or a Stop releases it
		b.timer = time.AfterFunc(bt.cfg.linger, func() { bt.lingered(b) })
	}
	e.b = b
	b.entries = append(b.entries, e)
	b.bytes += e.size
	b.waiting++
	bt.pending++
	switch {
	case len(b.entries) >= bt.cfg.maxMessages || b.bytes >= bt.cfg.maxBytes:
		bt.startLocked(b)
		start = append(start, b)
	case bt.pending+bt.sending >= len(bt.slots):
		// Every async send in flight is here: nobody else can join.
		for _, o := range bt.open {
			bt.startLocked(o)
			start = append(start, o)
		}
	}
	bt.wg.Add(len(start))
	bt.mu.Unlock()
	for _, sb := range start {
		go func() {
			defer bt.wg.Done()
			bt.flush(sb)
		}()
	}
	return true
}

// startLocked fixes b's entries and takes it out of the open batches;
// the caller sends it. Called with mu held.
func (bt *batcher) startLocked(b *batch) {
	if bt.open[b.key] == b {
		delete(bt.open, b.key)
	}
	b.started = true
	if b.timer.Stop() {
		bt.wg.Done() // the linger will not run
	}
	bt.pending -= len(b.entries)
	bt.sending += len(b.entries)
	for _, e := range b.entries {
		if !e.deadline.IsZero() && (b.deadline.IsZero() || e.deadline.Before(b.deadline)) {
			b.deadline = e.deadline
		}
	}
}

// lingered sends b when its linger has passed, unless it was sent or
// emptied before.
func (bt *batcher) lingered(b *batch) {
	defer bt.wg.Done()
	bt.mu.Lock()
	if b.started {
		bt.mu.Unlock()
		return
	}
	bt.startLocked(b)
	bt.mu.Unlock()
	bt.flush(b)
}

// flush sends a started batch and answers its entries.
func (bt *batcher) flush(b *batch) {
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
	b.s.sendBatch(ctx, b)
	b.markEncoded()
	cancel()
	bt.mu.Lock()
	bt.sending -= len(b.entries)
	bt.mu.Unlock()
	close(b.done)
}

// leave takes e out of its batch when its context ended before the
// batch's answer: out of the batch when not sent yet (unsent: its message
// is known not stored), else once the request is encoded.
func (bt *batcher) leave(e *batchEntry) (unsent bool) {
	b := e.b
	bt.mu.Lock()
	if !b.started {
		i := slices.Index(b.entries, e)
		b.entries = slices.Delete(b.entries, i, i+1)
		b.bytes -= e.size
		b.waiting--
		bt.pending--
		if len(b.entries) == 0 {
			bt.startLocked(b) // nothing to send: its linger is stopped
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

// close sends the open batches (there are none once every send has ended)
// and waits for every batch in flight; later sends go alone.
func (bt *batcher) close() {
	bt.mu.Lock()
	bt.closed = true
	var start []*batch
	for _, b := range bt.open {
		bt.startLocked(b)
		start = append(start, b)
	}
	bt.mu.Unlock()
	for _, b := range start {
		bt.flush(b)
	}
	bt.wg.Wait()
}

// wait blocks until e's batch answered it (answered true), or ctx ended
// and e left: it then returns the unknown outcome of an attempt cut short.
func (bt *batcher) wait(ctx context.Context, e *batchEntry) (o Outcome, unsent, answered bool) {
	select {
	case <-e.b.done:
		return Outcome{}, false, true
	case <-ctx.Done():
	}
	select {
	case <-e.b.done:
		return Outcome{}, false, true
	default:
	}
	unsent = bt.leave(e)
	return classifyError(status.FromContextError(ctx.Err()).Err()), unsent, false
}

// batchCodec is the proto codec, which tells the batch when its request
// has been encoded, so that an entry that leaves need not wait for the
// answer before its caller may change the message.
type batchCodec struct{ b *batch }

var protoCodec = encoding.GetCodecV2("proto")

func (c batchCodec) Marshal(v any) (mem.BufferSlice, error) {
	out, err := protoCodec.Marshal(v)
	c.b.markEncoded()
	return out, err
}

func (batchCodec) Unmarshal(data mem.BufferSlice, v any) error { return protoCodec.Unmarshal(data, v) }
func (batchCodec) Name() string                                { return protoCodec.Name() }

// entrySize is what a message counts towards a batch's bytes.
func entrySize(id, topic, tag string, keys []string, props map[string]string, body []byte) int {
	n := 32 + len(id) + len(topic) + len(tag) + len(body)
	for _, k := range keys {
		n += len(k) + 2
	}
	for k, v := range props {
		n += len(k) + len(v) + 4
	}
	return n
}

// failAll gives every entry the outcome o of a call that failed as a
// whole with err, whose peer pr is empty when the request never left the
// client for the broker at name (notSent).
func failAll(b *batch, o Outcome, err error, pr *peer.Peer, name string) {
	o, unsent := notSent(o, err, pr, name)
	for _, e := range b.entries {
		e.o, e.unsent = o, unsent
	}
}

// splitAll marks every entry to be sent alone: the whole request was
// refused by an answer that names no message.
func splitAll(b *batch) {
	for _, e := range b.entries {
		e.split = true
	}
}

// rocketry.v1

// v1Batch sends a batch on one endpoint's connection.
type v1Batch struct{ ep *endpoint }

func (s v1Batch) sendBatch(ctx context.Context, b *batch) {
	n := len(b.entries)
	req := &rocketryv1.SendMessageRequest{Messages: make([]*rocketryv1.Message, n)}
	for i, e := range b.entries {
		req.Messages[i] = e.v1
	}
	var resp rocketryv1.SendMessageResponse
	var pr peer.Peer
	err := s.ep.cc.Invoke(ctx, sendMethod, req, &resp, grpc.Peer(&pr), grpc.ForceCodecV2(batchCodec{b}))
	b.markEncoded()
	if err == nil {
		if len(resp.Results) != n {
			err = fmt.Errorf("producer: broker answered %d results for %d messages", len(resp.Results), n)
			for _, e := range b.entries {
				e.o = Outcome{Kind: FailedUnknown, Err: err}
			}
			return
		}
		for i, e := range b.entries {
			r := resp.Results[i]
			if id := r.GetMessageId(); id != "" && id != e.id {
				e.o = Outcome{Kind: FailedUnknown, Err: fmt.Errorf("producer: broker answered result %d for message %q, sent as %q", i, id, e.id)}
				continue
			}
			e.o, e.v1res[0] = Outcome{Kind: Stored}, r
		}
		return
	}
	o := classifyError(err)
	if o.Kind == Permanent && n > 1 && o.Code != brokercode.TopicNotFound {
		splitAll(b)
		return
	}
	failAll(b, o, err, &pr, s.ep.name)
}

// attemptBatched is the first attempt of an async send over rocketry.v1:
// its message joins the batch of its connection and topic. ok is false
// when the message goes alone instead: it could not join, or the batch's
// answer said nothing of it.
func (c *sendCall) attemptBatched(ctx context.Context, ep *endpoint, e *batchEntry, deadline time.Time) (o Outcome, unsent, ok bool) {
	bt := e.bt
	e.bt = nil // only the first attempt joins a batch
	e.v1, e.id = &c.msg, c.msg.MessageId
	e.size = entrySize(c.msg.MessageId, c.msg.Topic, c.msg.Tag, c.msg.Keys, c.msg.Properties, c.msg.Body)
	e.deadline = deadline // the batch's call ends by then, and so does the wait for it
	if e.deadline.IsZero() {
		e.deadline, _ = ctx.Deadline()
	}
	if !bt.join(batchKey{ep: ep, topic: c.msg.Topic}, v1Batch{ep}, e) {
		return Outcome{}, false, false
	}
	o, unsent, answered := bt.wait(ctx, e)
	if !answered {
		return o, unsent, true
	}
	if e.split {
		return Outcome{}, false, false
	}
	if e.o.Kind == Stored {
		c.resp.Results = e.v1res[:]
	}
	return e.o, e.unsent, true
}
