package deadletter

import (
	"errors"
	"fmt"
)

// ErrLocked is returned by Open, wrapped with the path and how long it
// waited, when another process (or another Store in this one) holds the
// store: two writers never share a store.
var ErrLocked = errors.New("deadletter: store is in use by another process")

// ErrOldSpool is returned by Open, wrapped with the path and what to do,
// for a spool file of the format rocketry used before this store (its
// producer.WithSpool): import it with Store.ImportSpool or
// `rocketry spool import`.
var ErrOldSpool = errors.New("deadletter: file is a spool of the old format")

// ErrNotStore is returned by Open, wrapped with the path and the cause, for
// a file that is neither a dead-letter store nor an old spool. The file is
// left untouched.
var ErrNotStore = errors.New("deadletter: file is not a dead-letter store")

// ErrCorrupt is wrapped by the error of a damaged store or record: Open's,
// for a store whose pages are not sound (a truncated file, a page out of
// bounds, a damaged freelist...), naming the first problem; a reader's
// (Get, Scan, Replay), for a record that cannot be read (its checksum
// fails, it does not decode, or its message ID is not its key), naming its
// key, or when the engine failed on a damaged page; and ImportSpool's, for
// an old spool whose record is torn or corrupt. A damaged record is kept,
// never deleted or replayed; Salvage copies what is intact into a new
// store.
var ErrCorrupt = errors.New("deadletter: damaged store or record")

// ErrNotFound is returned by Get for an ID the store does not hold.
var ErrNotFound = errors.New("deadletter: no record of that message ID")

// ErrTooLarge is returned by Put for a record over the store's limits
// (MaxBodyBytes for the body, MaxRecordBytes for the whole record).
var ErrTooLarge = errors.New("deadletter: record too large")

// ErrThrottled is returned by Replay, wrapped with the counts, when it
// stopped early because the broker kept throttling (ReplayOptions.MaxThrottled);
// the records not sent stay in the store.
var ErrThrottled = errors.New("deadletter: replay stopped: the broker keeps throttling")

// ErrClosed is returned by the methods of a closed Store.
var ErrClosed = errors.New("deadletter: store closed")

// RecordError is the error of a record that cannot be read (Get, Scan): its
// checksum fails, it does not decode, or its message ID is not its key. It
// wraps ErrCorrupt.
type RecordError struct {
	// Key is the record's key: what could be read of its message ID (the
	// ID itself, or "sha256:" and the hash of an ID over 1,024 bytes).
	Key string
	// Reason says what is wrong.
	Reason string
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("%v: key %q: %s", ErrCorrupt, e.Key, e.Reason)
}

// Unwrap returns ErrCorrupt.
func (e *RecordError) Unwrap() error { return ErrCorrupt }
