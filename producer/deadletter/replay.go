package deadletter

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/rocketry-go/rocketry/producer"
)

// A Resender sends a dead letter again; *producer.Producer is one: its
// Resend sends a record to the endpoint where it may be stored
// (MaybeStoredAt) and nowhere else, unless the Producer was made with
// producer.WithFailoverOnUnknownOutcome.
type Resender interface {
	Resend(ctx context.Context, d *producer.DeadLetter) (*producer.SendReceipt, error)
}

// ReplayOptions tunes Replay; the zero value has no limit.
type ReplayOptions struct {
	// MaxThrottled stops the replay once this many records in a row failed
	// because the broker throttled them (producer.IsThrottled): the broker
	// needs time, and the records not sent stay in the store for a later
	// replay. 0 means no limit.
	MaxThrottled int
	// Progress, when not nil, is called after each record with the counts
	// so far, on the replay's goroutine.
	Progress func(ReplayResult)
}

// ReplayResult counts what Replay did.
type ReplayResult struct {
	// Stored is how many records were sent without error (Duplicates
	// included) and deleted.
	Stored int
	// Duplicates is how many of Stored the broker already held (only
	// rocketry.v1 says so; RocketMQ 5 answers them as stored).
	Duplicates int
	// Failed is how many records were sent and failed, or could not be
	// sent where they may be stored (producer.ErrEndpointUnknown); they stay
	// in the store.
	Failed int
	// Corrupt is how many records could not be read (their checksum fails,
	// or they do not decode); they are never sent, and stay in the store
	// (Scan and Check report them).
	Corrupt int
	// AlreadyDelivered is how many records were found again after a replay
	// had delivered and deleted them (the store is read as of an older
	// transaction: see the delivered ledger in RELIABILITY.md); they are
	// deleted, not sent.
	AlreadyDelivered int
	// Left is how many records were not tried because ctx ended or the
	// replay stopped early; they stay in the store.
	Left int
}

// pageSize is how many records Replay reads at once.
const pageSize = 64

// Replay sends every record of the store with r, in the order of their
// keys (the records of a FIFO message, one with a MessageGroup, after the
// others: each group in the order the store took them, one at a time, and
// a group stops at its first record not stored, so that it is never
// stored out of order), and deletes each one stored (a duplicate, which the
// broker recognised by its ID, included) as soon as its resend returns, in
// a transaction of its own, before the next resend starts. A crash, a kill
// or a failed delete can cost the one record in flight only: stored by the
// broker but not yet deleted, it is sent again by the next replay, which a
// broker that deduplicates by message ID (rocketry.v1, within its window)
// answers as a duplicate and a RocketMQ 5 broker, which does not, stores a
// second time. A record deleted is not sent again. It holds no transaction
// while it sends, so a Producer may Put into the same Store meanwhile; a
// record put under a key after the replay's position may be replayed too,
// one before it is left for the next replay.
//
// Replay always moves forward and always ends: each page starts strictly
// after the last key of the one before (a key that does not is damage:
// ErrCorrupt); a pass reads at most twice the records the store held when
// it started, and a page; and ctx is checked before each page and each
// send. A record whose checksum fails is never sent (ReplayResult.Corrupt).
// Before it deletes a record stored, it appends it to the delivered ledger
// (FILE.delivered), so that a record that comes back after a rollback of
// the store is deleted, not sent (ReplayResult.AlreadyDelivered). Each
// record stored thus costs a write transaction of the store and an append
// to the ledger, each fsync'd.
//
// The error is nil when every record was tried, even if some sends failed
// (ReplayResult.Failed). When ctx ends, the replay stops with ctx's error;
// when opts.MaxThrottled records in a row were throttled, it stops with an
// error wrapping ErrThrottled; when a delete fails (a damaged store), it
// stops with that error, and the record stored counts as Failed. Every
// time the records not yet sent stay in the store (ReplayResult.Left) and
// a later Replay takes them up.
func (s *Store) Replay(ctx context.Context, r Resender, opts ReplayOptions) (ReplayResult, error) {
	var res ReplayResult
	switch {
	case r == nil:
		return res, errors.New("deadletter: Replay: resender is nil")
	case opts.MaxThrottled < 0:
		return res, fmt.Errorf("deadletter: Replay: MaxThrottled %d: must be >= 0 (0 = no limit)", opts.MaxThrottled)
	case s.ledger == nil:
		return res, fmt.Errorf("deadletter: Replay: %s is open read-only", s.path)
	}
	if err := s.compactLedger(); err != nil {
		return res, err
	}
	n0, err := s.Len()
	if err != nil {
		return res, err
	}
	budget := 2*n0 + pageSize
	var after []byte
	read, throttled := 0, 0
	var fifo []fifoRecord // the records of FIFO messages, put aside for replayGroups
	for {
		var stop error
		if err := ctx.Err(); err != nil {
			stop = err
		} else if read >= budget {
			stop = fmt.Errorf("deadletter: Replay: read %d records in one pass, its bound (twice the %d the store held at the start, and %d): records keep being put ahead of it", read, n0, pageSize)
		}
		if stop != nil {
			n, err := s.countAfter(after, budget)
			res.Left += n + len(fifo)
			return res, errors.Join(stop, err)
		}
		recs, err := s.page(after, pageSize)
		if err != nil {
			return res, err
		}
		if len(recs) == 0 {
			if err := s.replayGroups(ctx, r, opts, fifo, &res, &throttled); err != nil {
				return res, err
			}
			return res, s.compactLedger()
		}
		read += len(recs)
		after = recs[len(recs)-1].key
		var ghosts []pageRecord // deleted with the next record stored, or at the page's end
		for i, pr := range recs {
			if err := ctx.Err(); err != nil {
				stop = err
			} else if opts.MaxThrottled > 0 && throttled >= opts.MaxThrottled {
				stop = fmt.Errorf("%w: %d records in a row throttled", ErrThrottled, throttled)
			}
			if stop != nil {
				res.Left += len(recs) - i
				break
			}
			switch {
			case pr.err != nil:
				res.Corrupt++
				continue
			case s.ledger.delivered(pr.key, pr.sum):
				ghosts = append(ghosts, pr)
				res.AlreadyDelivered++
				continue
			}
			d := pr.d
			if g := d.Message.MessageGroup; g != "" {
				fifo = append(fifo, fifoRecord{topic: d.Message.Topic, group: g, seq: pr.seq, key: pr.key})
				continue
			}
			rc, err := r.Resend(ctx, d)
			switch {
			case err == nil:
				// Delivered (ledger) and deleted before the next resend
				// starts: a crash sends again at most this record.
				if err := s.deliver([]pageRecord{pr}, ghosts); err != nil {
					res.Failed++ // still stored on the broker: sent again next time
					n, cerr := s.countAfter(after, budget)
					res.Left += len(recs) - i - 1 + n + len(fifo)
					return res, errors.Join(err, cerr)
				}
				ghosts = nil
				res.Stored++
				if rc != nil && rc.Duplicate {
					res.Duplicates++
				}
				throttled = 0
			case producer.IsThrottled(err):
				res.Failed++
				throttled++
				s.keepFailed(d, err)
			default:
				res.Failed++
				throttled = 0
				s.keepFailed(d, err)
			}
			if opts.Progress != nil {
				opts.Progress(res)
			}
		}
		if err := s.deliver(nil, ghosts); err != nil {
			n, cerr := s.countAfter(after, budget)
			res.Left += n + len(fifo)
			return res, errors.Join(err, cerr)
		}
		if stop != nil {
			n, err := s.countAfter(after, budget)
			res.Left += n + len(fifo)
			return res, errors.Join(stop, err)
		}
	}
}

// fifoRecord is the record of a FIFO message, which Replay puts aside.
type fifoRecord struct {
	topic, group string
	seq          uint64
	key          []byte
}

// replayGroups sends the records of FIFO messages that the pass over the
// keys put aside: each group (topic and message group) in the order the
// store took them (their sequence; the key among records written before
// there was one), one at a time, each read again first. A group stops at
// its first record not stored (failed, damaged, stopped): its later
// records stay for the next replay (ReplayResult.Left), so that the group
// is never stored out of order.
func (s *Store) replayGroups(ctx context.Context, r Resender, opts ReplayOptions, recs []fifoRecord, res *ReplayResult, throttled *int) error {
	slices.SortFunc(recs, func(a, b fifoRecord) int {
		return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.group, b.group), cmp.Compare(a.seq, b.seq), bytes.Compare(a.key, b.key))
	})
	for i := 0; i < len(recs); {
		j := i + 1
		for j < len(recs) && recs[j].topic == recs[i].topic && recs[j].group == recs[i].group {
			j++
		}
		for n, fr := range recs[i:j] {
			var stop error
			if err := ctx.Err(); err != nil {
				stop = err
			} else if opts.MaxThrottled > 0 && *throttled >= opts.MaxThrottled {
				stop = fmt.Errorf("%w: %d records in a row throttled", ErrThrottled, *throttled)
			}
			if stop != nil {
				res.Left += len(recs) - i - n
				return stop
			}
			pr, ok, err := s.record(fr.key)
			switch {
			case err != nil:
				return err
			case !ok: // deleted meanwhile
				continue
			case pr.err != nil:
				res.Corrupt++
				res.Left += j - i - n - 1
			case s.ledger.delivered(pr.key, pr.sum):
				res.AlreadyDelivered++
				if err := s.deliver(nil, []pageRecord{pr}); err != nil {
					return err
				}
				continue
			default:
				rc, err := r.Resend(ctx, pr.d)
				if err == nil {
					if err := s.deliver([]pageRecord{pr}, nil); err != nil {
						res.Failed++ // still stored on the broker: sent again next time
						res.Left += len(recs) - i - n - 1
						return err
					}
					res.Stored++
					if rc != nil && rc.Duplicate {
						res.Duplicates++
					}
					*throttled = 0
					if opts.Progress != nil {
						opts.Progress(*res)
					}
					continue
				}
				res.Failed++
				if producer.IsThrottled(err) {
					*throttled++
				} else {
					*throttled = 0
				}
				s.keepFailed(pr.d, err)
				res.Left += j - i - n - 1
				if opts.Progress != nil {
					opts.Progress(*res)
				}
			}
			break // the group stops at its first record not stored
		}
		i = j
	}
	return nil
}

// deliver deletes the records stored by a replay (Replay gives it one at a
// time, as soon as it is stored), and those found in the ledger (ghosts),
// in one transaction; before, in the same transaction, it appends the
// stored ones to the ledger. A record whose value changed since
// it was read (put again meanwhile) is kept.
func (s *Store) deliver(stored, ghosts []pageRecord) error {
	if len(stored)+len(ghosts) == 0 {
		return nil
	}
	return s.update("delete", func(tx *bolt.Tx) error {
		txid := uint64(tx.ID())
		es := make([]ledgerEntry, len(stored))
		for i, pr := range stored {
			es[i] = ledgerEntry{txid: txid, key: string(pr.key), sum: pr.sum}
		}
		if len(es) > 0 {
			if err := s.ledger.add(es); err != nil {
				return err
			}
		}
		b := tx.Bucket(bucketRecords)
		for _, pr := range append(stored, ghosts...) {
			if v := b.Get(pr.key); v == nil || fingerprintOf(v) != pr.sum {
				continue
			}
			if err := b.Delete(pr.key); err != nil {
				return err
			}
		}
		return nil
	})
}

// compactLedger drops the ledger's entries that no meta page of the store
// can bring back.
func (s *Store) compactLedger() error {
	var txid uint64
	if err := s.view("read", func(tx *bolt.Tx) error {
		txid = uint64(tx.ID())
		return nil
	}); err != nil {
		return err
	}
	return s.ledger.compact(txid)
}

// countAfter counts the records whose keys follow after, in one read
// transaction that moves strictly forward and reads at most limit keys.
func (s *Store) countAfter(after []byte, limit int) (int, error) {
	n := 0
	err := s.view("read", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRecords)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		var k []byte
		if after == nil {
			k, _ = c.First()
		} else if k, _ = c.Seek(after); k != nil && bytes.Equal(k, after) {
			k, _ = c.Next()
		}
		last := after
		for ; k != nil && n < limit; k, _ = c.Next() {
			if last != nil && bytes.Compare(k, last) <= 0 {
				return fmt.Errorf("%w: key %q follows %q: keys out of order", ErrCorrupt, k, last)
			}
			last = bytes.Clone(k)
			n++
		}
		return nil
	})
	return n, err
}

// keepFailed updates the record of d after a failed resend, unless the
// resender's producer handed the message to a sink itself: its attempts
// and last error, and above all where it may now be stored (the resend's
// SendError.MaybeStoredAt), so that the next replay goes there and nowhere
// else. Put keeps the record's first time, and its pin when the resend
// names none. A record that cannot be updated stays as it was.
func (s *Store) keepFailed(d *producer.DeadLetter, err error) {
	var se *producer.SendError
	if !errors.As(err, &se) || se.DeadLettered {
		return
	}
	u := *d
	u.Attempts, u.Code, u.SendError = se.Attempts, se.Code, nil
	if se.MaybeStoredAt != "" {
		u.MaybeStoredAt = se.MaybeStoredAt
	}
	if se.Cause != nil {
		u.Err = se.Cause.Error()
	} else {
		u.Err = se.Error()
	}
	_ = s.Put(&u)
}
