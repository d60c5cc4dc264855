package deadletter_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/rocketry-go/rocketry/producer"
	"github.com/rocketry-go/rocketry/producer/deadletter"
)

func newProducer(t *testing.T, target string, opts ...producer.Option) *producer.Producer {
	t.Helper()
	p, err := producer.New(target, append([]producer.Option{producer.WithProtocol(producer.RocketryV1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// stored counts the broker's stored messages of topic by ID.
func stored(b *broker.Broker, topic string) map[string]int {
	out := map[string]int{}
	for _, m := range b.Messages(topic) {
		out[m.GetMessage().GetMessageId()]++
	}
	return out
}

// TestUnknownOutcomeIsPinned: a send whose attempts end with an unknown
// outcome on a broker (the connection dropped after the request left) is
// kept with that broker as MaybeStoredAt, and a replay over three brokers
// sends it to that one only.
func TestUnknownOutcomeIsPinned(t *testing.T) {
	bs := brokertest.StartCluster(t, 3)
	slow := bs[1]
	// Not a latency over the attempt timeout: when the call's deadline
	// passes, the broker's own deadline may answer it (UNAVAILABLE, not
	// stored) before the client's, and it then pins nothing, rightly.
	require.NoError(t, slow.SetFaults(broker.Faults{DropRate: 1}))
	store := openStore(t, filepath.Join(t.TempDir(), "dead.db"))
	p := newProducer(t, slow.Addr(), producer.WithDeadLetterSink(store),
		producer.WithMaxAttempts(2), producer.WithAttemptTimeout(2*time.Second))
	_, err := p.Send(context.Background(), &producer.Message{ID: "m-1", Topic: "orders", Body: []byte("x")})
	var se *producer.SendError
	require.ErrorAs(t, err, &se)
	assert.True(t, se.DeadLettered)
	assert.Equal(t, slow.Addr(), se.MaybeStoredAt)
	d, err := store.Get("m-1")
	require.NoError(t, err)
	assert.Equal(t, slow.Addr(), d.MaybeStoredAt)
	require.NoError(t, p.Close(context.Background()))

	require.NoError(t, slow.SetFaults(broker.Faults{}))
	before := [3]int64{}
	for i, b := range bs {
		before[i] = b.Stats().GetSendRequests()
	}
	all := bs[0].Addr() + "," + bs[1].Addr() + "," + bs[2].Addr()
	rp := newProducer(t, all)
	res, err := store.Replay(context.Background(), rp, deadletter.ReplayOptions{})
	require.NoError(t, err)
	assert.Equal(t, deadletter.ReplayResult{Stored: 1}, res)
	for i, b := range bs {
		want := int64(0)
		if b == slow {
			want = 1
		}
		assert.Equal(t, want, b.Stats().GetSendRequests()-before[i], "sends to broker %d", i)
	}
	assert.Equal(t, 1, stored(slow, "orders")["m-1"])
}

// TestBodyOverOldCapIsKept is the regression test of issue 13's fifth
// item: a body allowed by WithMaxBodyBytes but over the spool's hidden
// 64 MiB record cap was neither stored nor dead-lettered (DeadLettered false). The
// store's limit is checked at New, so what New accepts is kept.
func TestBodyOverOldCapIsKept(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 64 MiB")
	}
	const size = 64<<20 + 1
	store := openStore(t, filepath.Join(t.TempDir(), "dead.db"))
	// Nothing listens there: the attempt fails before it is sent.
	p := newProducer(t, "127.0.0.1:9", producer.WithDeadLetterSink(store), producer.WithMaxBodyBytes(size),
		producer.WithMaxAttempts(1), producer.WithAttemptTimeout(50*time.Millisecond))
	_, err := p.Send(context.Background(), &producer.Message{ID: "big", Topic: "t", Body: make([]byte, size)})
	var se *producer.SendError
	require.ErrorAs(t, err, &se)
	assert.True(t, se.DeadLettered, "DeadLettered = false: the message is lost")
	d, err := store.Get("big")
	require.NoError(t, err)
	assert.Len(t, d.Message.Body, size)

	_, err = producer.New("127.0.0.1:9", producer.WithProtocol(producer.RocketryV1), producer.WithDeadLetterSink(store), producer.WithMaxBodyBytes(deadletter.MaxBodyBytes+1))
	var oe *producer.OptionError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "WithMaxBodyBytes", oe.Option)
}

// TestReplayWhileProducerPuts is a regression test of issue 13's third
// item: a replay rewrote the spool and renamed it over the old one, so the
// records a producer appended meanwhile were dropped. Replay now deletes
// only what it stored, in the same store.
func TestReplayWhileProducerPuts(t *testing.T) {
	b := brokertest.Start(t)
	store := openStore(t, filepath.Join(t.TempDir(), "dead.db"))
	const n = 300
	for i := range n {
		require.NoError(t, store.Put(letter(fmt.Sprintf("old-%03d", i), "")))
	}
	rp := newProducer(t, b.Addr())
	var wg sync.WaitGroup
	var put atomic.Int32
	wg.Go(func() {
		for i := range n {
			// Keys both before and after the replay's position.
			if assert.NoError(t, store.Put(letter(fmt.Sprintf("new-%03d", i), ""))) {
				put.Add(1)
			}
		}
	})
	res, err := store.Replay(context.Background(), rp, deadletter.ReplayOptions{})
	wg.Wait()
	require.NoError(t, err)
	require.EqualValues(t, n, put.Load())

	left := map[string]bool{}
	for _, id := range ids(t, store) {
		left[id] = true
	}
	onBroker := stored(b, "orders")
	for i := range n {
		id := fmt.Sprintf("new-%03d", i)
		// Each new record is either replayed (stored, deleted) or still
		// in the store: never dropped.
		assert.True(t, left[id] != (onBroker[id] == 1), "%s: in the store %v, stored %d times", id, left[id], onBroker[id])
		old := fmt.Sprintf("old-%03d", i)
		assert.False(t, left[old], "%s was replayed but not deleted", old)
		assert.Equal(t, 1, onBroker[old], "%s stored", old)
	}
	assert.Equal(t, len(onBroker), res.Stored)
	assert.Equal(t, 2*n, res.Stored+len(left), "stored and left")
}

// TestReplayResumes: a replay stopped by its context keeps what it did not
// send; the next one sends the rest, and nothing is stored twice.
func TestReplayResumes(t *testing.T) {
	b := brokertest.Start(t)
	store := openStore(t, filepath.Join(t.TempDir(), "dead.db"))
	for i := range 100 {
		require.NoError(t, store.Put(letter(fmt.Sprintf("m-%03d", i), "")))
	}
	rp := newProducer(t, b.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	res, err := store.Replay(ctx, rp, deadletter.ReplayOptions{Progress: func(r deadletter.ReplayResult) {
		if r.Stored == 30 {
			cancel()
		}
	}})
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, deadletter.ReplayResult{Stored: 30, Left: 70}, res)
	n, err := store.Len()
	require.NoError(t, err)
	assert.Equal(t, 70, n)

	res, err = store.Replay(context.Background(), rp, deadletter.ReplayOptions{})
	require.NoError(t, err)
	assert.Equal(t, deadletter.ReplayResult{Stored: 70}, res)
	onBroker := stored(b, "orders")
	assert.Len(t, onBroker, 100)
	for id, c := range onBroker {
		assert.Equal(t, 1, c, id)
	}
}

// TestReplayStopsWhenThrottled: past MaxThrottled records in a row refused
// by throttling, the replay stops with ErrThrottled and keeps the rest.
func TestReplayStopsWhenThrottled(t *testing.T) {
	b := brokertest.Start(t, broker.WithThrottle(broker.Throttle{MaxSendRate: 0.01}))
	store := openStore(t, filepath.Join(t.TempDir(), "dead.db"))
	for i := range 10 {
		require.NoError(t, store.Put(letter(fmt.Sprintf("m-%d", i), "")))
	}
	rp := newProducer(t, b.Addr(), producer.WithMaxAttempts(1))
	res, err := store.Replay(context.Background(), rp, deadletter.ReplayOptions{MaxThrottled: 2})
	require.ErrorIs(t, err, deadletter.ErrThrottled)
	assert.Equal(t, deadletter.ReplayResult{Stored: 1, Failed: 2, Left: 7}, res)
	n, err := store.Len()
	require.NoError(t, err)
	assert.Equal(t, 9, n)

	_, err = store.Replay(context.Background(), rp, deadletter.ReplayOptions{MaxThrottled: -1})
	assert.ErrorContains(t, err, "MaxThrottled -1")
	_, err = store.Replay(context.Background(), nil, deadletter.ReplayOptions{})
	assert.ErrorContains(t, err, "resender is nil")
}

// TestReplayKeepsFailures: a record whose resend fails stays, counted.
func TestReplayKeepsFailures(t *testing.T) {
	b := brokertest.Start(t, broker.WithFaults(broker.Faults{Unavailable: true}))
	store := openStore(t, filepath.Join(t.TempDir(), "dead.db"))
	require.NoError(t, store.Put(letter("m-1", "")))
	require.NoError(t, store.Put(letter("m-2", "127.0.0.1:9"))) // not one of the replay's brokers
	rp := newProducer(t, b.Addr(), producer.WithMaxAttempts(2), producer.WithFailureSchedule(backoff.Immediate))
	var errs []error
	res, err := store.Replay(context.Background(), resendFunc(func(ctx context.Context, d *producer.DeadLetter) (*producer.SendReceipt, error) {
		r, err := rp.Resend(ctx, d)
		errs = append(errs, err)
		return r, err
	}), deadletter.ReplayOptions{})
	require.NoError(t, err)
	assert.Equal(t, deadletter.ReplayResult{Failed: 2}, res)
	require.Len(t, errs, 2)
	assert.True(t, errors.Is(errs[0], producer.ErrAttemptsExhausted), "m-1: %v", errs[0])
	assert.ErrorIs(t, errs[1], producer.ErrEndpointUnknown)
	assert.Equal(t, []string{"m-1", "m-2"}, ids(t, store))
}

type resendFunc func(ctx context.Context, d *producer.DeadLetter) (*producer.SendReceipt, error)

func (f resendFunc) Resend(ctx context.Context, d *producer.DeadLetter) (*producer.SendReceipt, error) {
	return f(ctx, d)
}

// TestReplayKeepsWhereAFailureMayBeStored: a record with no pin whose
// resend ends with an unknown outcome on a broker (the connection dropped
// after the request left: the broker may have stored it) keeps that
// broker, so that the next replay sends it there and nowhere else. Before,
// the record stayed unpinned and a replay to another address could store
// it a second time.
func TestReplayKeepsWhereAFailureMayBeStored(t *testing.T) {
	b := brokertest.Start(t)
	store := openStore(t, filepath.Join(t.TempDir(), "dead.db"))
	require.NoError(t, store.Put(letter("m-1", "")))
	rp := newProducer(t, b.Addr(), producer.WithMaxAttempts(1), producer.WithAttemptTimeout(2*time.Second))
	// Connected first (a send stored), then the broker drops the
	// connection of every call it receives: an attempt that never left
	// would pin nothing. Not a blackhole: when the call's deadline passes,
	// a blackholed call may be answered by the broker's own deadline
	// (UNAVAILABLE, not stored) before the client's, and it then pins
	// nothing, rightly.
	require.Eventually(t, func() bool {
		_, err := rp.Send(context.Background(), &producer.Message{Topic: "t", Body: []byte("connect")})
		return err == nil
	}, 10*time.Second, time.Millisecond, "a send to the broker before it drops connections")
	require.NoError(t, b.SetFaults(broker.Faults{DropRate: 1}))
	res, err := store.Replay(context.Background(), rp, deadletter.ReplayOptions{})
	require.NoError(t, err)
	assert.Equal(t, deadletter.ReplayResult{Failed: 1}, res)
	d, err := store.Get("m-1")
	require.NoError(t, err)
	assert.Equal(t, b.Addr(), d.MaybeStoredAt, "the record keeps the broker of the unknown outcome")
	assert.Equal(t, 1, d.Attempts)
	assert.NotEmpty(t, d.Err)
}

// TestReplayDeletesEachRecordAsStored is the regression test of the
// review's replay item: the records stored by a replay were deleted a page
// (64) at a time, after the page's last resend, so a crash, a kill or a
// failed delete mid-page sent every record of the page already stored
// again at the next replay, a second copy on a broker that does not
// deduplicate (RocketMQ 5). Each record is now deleted as soon as its
// resend returns: what the next replay sends again is at most the one
// record in flight.
func TestReplayDeletesEachRecordAsStored(t *testing.T) {
	const n = 10
	setup := func(t *testing.T) (path string, store *deadletter.Store, sends map[string]int, resend resendFunc) {
		b := brokertest.Start(t)
		path = filepath.Join(t.TempDir(), "dead.db")
		store = openStore(t, path)
		for i := range n {
			require.NoError(t, store.Put(letter(fmt.Sprintf("m-%03d", i), "")))
		}
		rp := newProducer(t, b.Addr())
		sends = map[string]int{}
		resend = func(ctx context.Context, d *producer.DeadLetter) (*producer.SendReceipt, error) {
			sends[d.Message.ID]++
			return rp.Resend(ctx, d)
		}
		return path, store, sends, resend
	}
	// replayAgain reopens the store and replays what is left; every record
	// sent twice in all is returned.
	replayAgain := func(t *testing.T, path string, sends map[string]int, resend resendFunc) (res deadletter.ReplayResult, twice []string) {
		s := openStore(t, path)
		res, err := s.Replay(context.Background(), resend, deadletter.ReplayOptions{})
		require.NoError(t, err)
		left, err := s.Len()
		require.NoError(t, err)
		assert.Zero(t, left)
		for i := range n {
			id := fmt.Sprintf("m-%03d", i)
			switch sends[id] {
			case 1:
			case 2:
				twice = append(twice, id)
			default:
				t.Errorf("%s sent %d times", id, sends[id])
			}
		}
		return res, twice
	}

	t.Run("delete fails after the first record", func(t *testing.T) {
		path, store, sends, resend := setup(t)
		calls := 0
		res, err := store.Replay(context.Background(), resendFunc(func(ctx context.Context, d *producer.DeadLetter) (*producer.SendReceipt, error) {
			r, err := resend(ctx, d)
			if calls++; calls == 2 {
				// The second record is stored; its delete then fails.
				require.NoError(t, store.Close())
			}
			return r, err
		}), deadletter.ReplayOptions{})
		require.ErrorIs(t, err, deadletter.ErrClosed)
		assert.Equal(t, deadletter.ReplayResult{Stored: 1, Failed: 1, Left: n - 2}, res, "the replay stops at the failed delete")
		assert.Equal(t, 2, calls, "no record sent after the failed delete")

		res, twice := replayAgain(t, path, sends, resend)
		// m-001 again: the bundled broker (rocketry.v1) answers it as a
		// duplicate; a RocketMQ 5 broker would store it again.
		assert.Equal(t, deadletter.ReplayResult{Stored: n - 1, Duplicates: 1}, res, "the first record is not sent again")
		assert.Equal(t, []string{"m-001"}, twice, "only the record whose delete failed is sent again")
	})

	t.Run("crash mid-page", func(t *testing.T) {
		path, store, sends, resend := setup(t)
		calls := 0
		func() {
			defer func() { assert.Equal(t, "crash", recover(), "the replay's crash") }()
			_, _ = store.Replay(context.Background(), resendFunc(func(ctx context.Context, d *producer.DeadLetter) (*producer.SendReceipt, error) {
				if calls++; calls == 4 {
					// The process dies while the fourth record is in flight
					// (stored on the broker, or not: it is sent again).
					_, _ = resend(ctx, d)
					panic("crash")
				}
				return resend(ctx, d)
			}), deadletter.ReplayOptions{})
		}()
		require.NoError(t, store.Close())

		res, twice := replayAgain(t, path, sends, resend)
		assert.Equal(t, deadletter.ReplayResult{Stored: n - 3, Duplicates: 1}, res, "the three records stored before the crash are not sent again")
		assert.Equal(t, []string{"m-003"}, twice, "only the record in flight at the crash is sent again")
	})
}
