package batch

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rocketry-go/rocketry/brokercode"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// item is the payload of these tests: a message and the result its sender
// writes.
type item struct {
	id  string
	res string // written by the batch's goroutine
}

type entry = Entry[item, string]

// recorder is a Sender that answers each entry with answer (by default
// "stored <id>", its own) and records the batches it sent.
type recorder struct {
	mu      sync.Mutex
	batches [][]string  // the IDs of each batch sent
	dls     []time.Time // each batch's deadline
	answer  func(b *Batch[item, string])
	hold    chan struct{} // when set, SendBatch marks the request encoded and waits for it to close
}

func (r *recorder) SendBatch(ctx context.Context, b *Batch[item, string]) {
	var ids []string
	for _, e := range b.Entries() {
		ids = append(ids, e.Msg.id)
	}
	dl, _ := ctx.Deadline()
	r.mu.Lock()
	r.batches = append(r.batches, ids)
	r.dls = append(r.dls, dl)
	r.mu.Unlock()
	if r.hold != nil {
		b.MarkEncoded()
		<-r.hold
	}
	if r.answer != nil {
		r.answer(b)
		return
	}
	for _, e := range b.Entries() {
		if b.Answer(e, "stored "+e.Msg.id, true, Refusal{}) {
			e.Msg.res = "result of " + e.Msg.id
		}
	}
}

func (r *recorder) sent() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]string(nil), r.batches...)
}

// newBatcher returns a Batcher over an async pool of 32 slots, inFlight of
// them taken.
func newBatcher(t *testing.T, cfg Config, inFlight int) *Batcher {
	slots := make(chan struct{}, 32)
	for range inFlight {
		slots <- struct{}{}
	}
	bt := New(cfg, slots, context.Background())
	require.NotNil(t, bt)
	return bt
}

// joinAndWait joins e to the batch of key and waits for its answer on a
// goroutine of its own; the answer arrives on the channel.
func joinAndWait(ctx context.Context, bt *Batcher, key Key, s Sender[item, string], e *entry) <-chan Answer[string] {
	out := make(chan Answer[string], 1)
	go func() {
		if !Join(bt, key, s, e) {
			close(out)
			return
		}
		a, answered := Wait(ctx, bt, e)
		if !answered {
			a.Outcome = "left"
		}
		out <- a
	}()
	return out
}

var key = Key{To: "broker-a:8081", Topic: "t"}

func TestNewCapsBatchByInFlight(t *testing.T) {
	cfg := Config{Linger: time.Millisecond, MaxMessages: 128, MaxBytes: 1 << 20}
	assert.Equal(t, 16, New(cfg, make(chan struct{}, 64), context.Background()).MaxMessages(), "a quarter of the sends in flight")
	assert.Equal(t, 3, New(Config{Linger: time.Millisecond, MaxMessages: 3, MaxBytes: 1}, make(chan struct{}, 64), context.Background()).MaxMessages())
	assert.Nil(t, New(cfg, make(chan struct{}, 7), context.Background()), "under 2 messages a batch: no batching")
	assert.Nil(t, New(Config{MaxMessages: 128, MaxBytes: 1 << 20}, make(chan struct{}, 64), context.Background()), "no linger: no batching")
}

// TestFullBatchGoesAtOnce: a batch of MaxMessages is sent without waiting
// for its linger, and each entry gets its own answer and result.
func TestFullBatchGoesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bt := newBatcher(t, Config{Linger: time.Hour, MaxMessages: 3, MaxBytes: 1 << 20}, 8)
		r := &recorder{}
		es := []*entry{{Msg: item{id: "a"}, Size: 1}, {Msg: item{id: "b"}, Size: 1}, {Msg: item{id: "c"}, Size: 1}}
		var outs []<-chan Answer[string]
		for _, e := range es {
			outs = append(outs, joinAndWait(t.Context(), bt, key, r, e))
			synctest.Wait()
		}
		for i, out := range outs {
			a := <-out
			assert.Equal(t, Answer[string]{Outcome: "stored " + es[i].Msg.id}, a)
			assert.Equal(t, "result of "+es[i].Msg.id, es[i].Msg.res)
		}
		assert.Equal(t, [][]string{{"a", "b", "c"}}, r.sent())
		bt.Close()
	})
}

// TestLingerSendsBatch: a batch that is not full waits its linger, no
// more, and its call's deadline is the earliest of its entries'.
func TestLingerSendsBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bt := newBatcher(t, Config{Linger: 10 * time.Millisecond, MaxMessages: 8, MaxBytes: 1 << 20}, 8)
		r := &recorder{}
		start := time.Now()
		a := joinAndWait(t.Context(), bt, key, r, &entry{Msg: item{id: "a"}, Size: 1, Deadline: start.Add(time.Minute)})
		b := joinAndWait(t.Context(), bt, key, r, &entry{Msg: item{id: "b"}, Size: 1, Deadline: start.Add(time.Second)})
		time.Sleep(9 * time.Millisecond)
		synctest.Wait()
		assert.Empty(t, r.sent(), "before the linger")
		time.Sleep(time.Millisecond)
		synctest.Wait()
		require.Len(t, r.sent(), 1, "at the linger")
		assert.ElementsMatch(t, []string{"a", "b"}, r.sent()[0])
		assert.Equal(t, start.Add(time.Second), r.dls[0], "the earliest entry's deadline")
		<-a
		<-b
		bt.Close()
	})
}

// TestEverySendInFlightWaiting: when every async send in flight is in a
// batch, no other message can join, so the batch goes without its linger
// (the Nagle rule).
func TestEverySendInFlightWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bt := newBatcher(t, Config{Linger: time.Hour, MaxMessages: 8, MaxBytes: 1 << 20}, 2)
		r := &recorder{}
		other := Key{To: "broker-b:8081", Topic: "t"}
		a := joinAndWait(t.Context(), bt, key, r, &entry{Msg: item{id: "a"}, Size: 1})
		synctest.Wait()
		assert.Empty(t, r.sent(), "one of the two sends in flight is elsewhere")
		b := joinAndWait(t.Context(), bt, other, r, &entry{Msg: item{id: "b"}, Size: 1})
		assert.Equal(t, "stored a", (<-a).Outcome)
		assert.Equal(t, "stored b", (<-b).Outcome)
		assert.ElementsMatch(t, [][]string{{"a"}, {"b"}}, r.sent(), "every open batch goes")
		bt.Close()
	})
}

// TestMaxBytes: a message of MaxBytes or more goes alone; one that would
// take a batch over MaxBytes starts the next batch, and the full one goes.
func TestMaxBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bt := newBatcher(t, Config{Linger: time.Hour, MaxMessages: 8, MaxBytes: 100}, 8)
		r := &recorder{}
		assert.False(t, Join(bt, key, r, &entry{Msg: item{id: "big"}, Size: 100}))
		a := joinAndWait(t.Context(), bt, key, r, &entry{Msg: item{id: "a"}, Size: 60})
		synctest.Wait()
		b := joinAndWait(t.Context(), bt, key, r, &entry{Msg: item{id: "b"}, Size: 60})
		assert.Equal(t, "stored a", (<-a).Outcome)
		synctest.Wait()
		assert.Equal(t, [][]string{{"a"}}, r.sent())
		bt.Close() // sends b's open batch
		assert.Equal(t, "stored b", (<-b).Outcome)
		assert.Equal(t, [][]string{{"a"}, {"b"}}, r.sent())
		assert.False(t, Join(bt, key, r, &entry{Msg: item{id: "c"}, Size: 1}), "closed: it goes alone")
	})
}

// TestLeaveBeforeSent: an entry whose context ends before its batch is
// sent is taken out of it (unsent), and the others are sent without it;
// a batch that everyone left is not sent at all.
func TestLeaveBeforeSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bt := newBatcher(t, Config{Linger: 10 * time.Millisecond, MaxMessages: 8, MaxBytes: 1 << 20}, 8)
		r := &recorder{}
		ctx, cancel := context.WithCancel(t.Context())
		a := joinAndWait(ctx, bt, key, r, &entry{Msg: item{id: "a"}, Size: 1})
		b := joinAndWait(t.Context(), bt, key, r, &entry{Msg: item{id: "b"}, Size: 1})
		synctest.Wait()
		cancel()
		assert.Equal(t, Answer[string]{Outcome: "left", Unsent: true}, <-a)
		assert.Equal(t, "stored b", (<-b).Outcome)
		assert.Equal(t, [][]string{{"b"}}, r.sent())

		ctx, cancel = context.WithCancel(t.Context())
		c := joinAndWait(ctx, bt, key, r, &entry{Msg: item{id: "c"}, Size: 1})
		synctest.Wait()
		cancel()
		assert.Equal(t, Answer[string]{Outcome: "left", Unsent: true}, <-c)
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Len(t, r.sent(), 1, "nothing left to send")
		bt.Close()
	})
}

// TestLeaveAfterSent: an entry whose context ends once its batch is on the
// wire leaves as soon as the request is encoded, not stored-or-not known
// (not unsent); the batch goes on for the others, and its call ends when
// every entry has left.
func TestLeaveAfterSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bt := newBatcher(t, Config{Linger: time.Hour, MaxMessages: 2, MaxBytes: 1 << 20}, 8)
		r := &recorder{hold: make(chan struct{})}
		r.answer = func(b *Batch[item, string]) {
			for _, e := range b.Entries() {
				b.Answer(e, "stored "+e.Msg.id, true, Refusal{})
			}
		}
		ctx, cancel := context.WithCancel(t.Context())
		a := joinAndWait(ctx, bt, key, r, &entry{Msg: item{id: "a"}, Size: 1})
		synctest.Wait()
		b := joinAndWait(t.Context(), bt, key, r, &entry{Msg: item{id: "b"}, Size: 1})
		synctest.Wait()
		require.Len(t, r.sent(), 1)
		cancel()
		assert.Equal(t, Answer[string]{Outcome: "left"}, <-a, "sent: it may be stored")
		close(r.hold)
		assert.Equal(t, "stored b", (<-b).Outcome)
		bt.Close()
	})
}

// TestEveryoneLeftEndsTheCall: the batch's call is cancelled once every
// entry has left.
func TestEveryoneLeftEndsTheCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bt := newBatcher(t, Config{Linger: time.Hour, MaxMessages: 2, MaxBytes: 1 << 20}, 8)
		ended := make(chan error, 1)
		s := senderFunc(func(ctx context.Context, b *Batch[item, string]) {
			b.MarkEncoded()
			<-ctx.Done()
			ended <- ctx.Err()
			b.FailAll("cancelled", false, Refusal{})
		})
		ctx, cancel := context.WithCancel(t.Context())
		a := joinAndWait(ctx, bt, key, s, &entry{Msg: item{id: "a"}, Size: 1})
		synctest.Wait()
		b := joinAndWait(ctx, bt, key, s, &entry{Msg: item{id: "b"}, Size: 1})
		synctest.Wait()
		cancel()
		<-a
		<-b
		assert.ErrorIs(t, <-ended, context.Canceled)
		bt.Close()
	})
}

type senderFunc func(ctx context.Context, b *Batch[item, string])

func (f senderFunc) SendBatch(ctx context.Context, b *Batch[item, string]) { f(ctx, b) }

// TestSplit is the split decision's table.
func TestSplit(t *testing.T) {
	bad := Refusal{Permanent: true, Code: brokercode.BadRequest}
	for _, tc := range []struct {
		name string
		n    int
		own  bool
		r    Refusal
		want bool
	}{
		{"a 4xx that names no message, of several", 2, false, bad, true},
		{"too large, of several", 128, false, Refusal{Permanent: true, Code: brokercode.MessageTooLarge}, true},
		{"the message's own 4xx", 2, true, bad, false},
		{"a batch of one: its message's answer", 1, false, bad, false},
		{"topic not found: true of every message", 2, false, Refusal{Permanent: true, Code: brokercode.TopicNotFound}, false},
		{"not permanent", 2, false, Refusal{Code: brokercode.Unavailable}, false},
	} {
		assert.Equal(t, tc.want, Split(tc.n, tc.own, tc.r), tc.name)
	}
}

// TestAnswersOfABatch: FailAll gives every entry the call's outcome, or
// marks them all to go alone when Split says so; Answer marks one entry.
func TestAnswersOfABatch(t *testing.T) {
	bad := Refusal{Permanent: true, Code: brokercode.BadRequest}
	for _, tc := range []struct {
		name   string
		answer func(b *Batch[item, string])
		want   []Answer[string]
	}{
		{"failed whole, not sent", func(b *Batch[item, string]) { b.FailAll("unavailable", true, Refusal{}) },
			[]Answer[string]{{Outcome: "unavailable", Unsent: true}, {Outcome: "unavailable", Unsent: true}}},
		{"refused whole with a 4xx", func(b *Batch[item, string]) { b.FailAll("bad", false, bad) },
			[]Answer[string]{{Split: true}, {Split: true}}},
		{"one entry's own 4xx, the other's the request's", func(b *Batch[item, string]) {
			es := b.Entries()
			assert.True(t, b.Answer(es[0], "bad", true, bad))
			assert.False(t, b.Answer(es[1], "bad", false, bad))
		}, []Answer[string]{{Outcome: "bad"}, {Split: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				bt := newBatcher(t, Config{Linger: time.Hour, MaxMessages: 2, MaxBytes: 1 << 20}, 8)
				r := &recorder{answer: tc.answer}
				a := joinAndWait(t.Context(), bt, key, r, &entry{Msg: item{id: "a"}, Size: 1})
				synctest.Wait()
				b := joinAndWait(t.Context(), bt, key, r, &entry{Msg: item{id: "b"}, Size: 1})
				assert.Equal(t, tc.want, []Answer[string]{<-a, <-b})
				bt.Close()
			})
		})
	}
}

// TestPropsKeepBatchesApart: entries whose keys differ only in Props never
// share a batch; those with the same Props do.
func TestPropsKeepBatchesApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bt := newBatcher(t, Config{Linger: time.Hour, MaxMessages: 2, MaxBytes: 1 << 20}, 8)
		r := &recorder{}
		x, y := key, key
		x.Props, y.Props = "x", "y"
		a := joinAndWait(t.Context(), bt, x, r, &entry{Msg: item{id: "a"}, Size: 1})
		synctest.Wait()
		b := joinAndWait(t.Context(), bt, y, r, &entry{Msg: item{id: "b"}, Size: 1})
		synctest.Wait()
		assert.Empty(t, r.sent(), "two batches of one each, neither full")
		c := joinAndWait(t.Context(), bt, x, r, &entry{Msg: item{id: "c"}, Size: 1})
		assert.Equal(t, "stored a", (<-a).Outcome)
		assert.Equal(t, "stored c", (<-c).Outcome)
		assert.Equal(t, [][]string{{"a", "c"}}, r.sent(), "x's batch is full")
		bt.Close() // sends y's open batch
		assert.Equal(t, "stored b", (<-b).Outcome)
		assert.Equal(t, [][]string{{"a", "c"}, {"b"}}, r.sent())
	})
}
