package deadletter

import (
	"context"
	"errors"
	"fmt"

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
	// Corrupt is how many records could not be read; they stay in the store
	// (Scan reports them).
	Corrupt int
	// Left is how many records were not tried because ctx ended or the
	// replay stopped early; they stay in the store.
	Left int
}

// pageSize is how many records Replay reads at once, and deletes in one
// transaction after they were stored.
const pageSize = 64

// Replay sends every record of the store with r, in the order of their
// keys, and deletes each one stored (a duplicate, which the broker
// recognised by its ID, included), a page of records per transaction: a
// crash before a delete only means the record is sent again, which stores
// nothing twice. It holds no transaction while it sends, so a Producer may
// Put into the same Store meanwhile; a record put under a key after the
// replay's position is replayed too, one before it is left for the next
// replay.
//
// The error is nil when every record was tried, even if some sends failed
// (ReplayResult.Failed). When ctx ends, the replay stops with ctx's error;
// when opts.MaxThrottled records in a row were throttled, it stops with an
// error wrapping ErrThrottled. Either way the records not yet sent stay in
// the store (ReplayResult.Left) and a later Replay takes them up.
func (s *Store) Replay(ctx context.Context, r Resender, opts ReplayOptions) (ReplayResult, error) {
	var res ReplayResult
	if r == nil {
		return res, errors.New("deadletter: Replay: resender is nil")
	}
	if opts.MaxThrottled < 0 {
		return res, fmt.Errorf("deadletter: Replay: MaxThrottled %d: must be >= 0 (0 = no limit)", opts.MaxThrottled)
	}
	var after []byte
	throttled := 0
	for {
		recs, bad, last, err := s.page(after, pageSize)
		if err != nil {
			return res, err
		}
		res.Corrupt += len(bad)
		if last == nil {
			return res, nil
		}
		after = last
		var stored []string
		var stop error
		for i, d := range recs {
			if err := ctx.Err(); err != nil {
				stop = err
			} else if opts.MaxThrottled > 0 && throttled >= opts.MaxThrottled {
				stop = fmt.Errorf("%w: %d records in a row throttled", ErrThrottled, throttled)
			}
			if stop != nil {
				res.Left += len(recs) - i
				break
			}
			rc, err := r.Resend(ctx, d)
			switch {
			case err == nil:
				stored = append(stored, d.Message.ID)
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
		if err := s.Delete(stored...); err != nil {
			// Still stored on the broker; the records are sent again next time.
			res.Stored -= len(stored)
			res.Failed += len(stored)
			return res, err
		}
		if stop != nil {
			n, err := s.countAfter(after)
			res.Left += n
			return res, errors.Join(stop, err)
		}
	}
}

// countAfter counts the records whose keys follow after.
func (s *Store) countAfter(after []byte) (int, error) {
	n := 0
	for {
		recs, bad, last, err := s.page(after, 1024)
		if err != nil || last == nil {
			return n, err
		}
		n += len(recs) + len(bad)
		after = last
	}
}

// keepFailed updates the record of d after a failed resend, unless the
// resender's producer handed the message to a sink itself: its attempts
// and last error, and above all where it may now be stored (the resend's
// SendError.MaybeStoredAt), so that the next replay goes there and nowhere
// else. Put keeps the record's first time, and its pin when the resend
// names none. A record that cannot be updated stays as it was.
func (s *Store) keepFailed(d *producer.DeadLetter, err error) {
	var se *producer.SendError
	if !errors.As(err, &se) || se.Spooled {
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
