package deadletter

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/rocketry-go/rocketry/producer"
)

// DefaultLockTimeout is how long Open waits for a store that another
// process holds, unless WithLockTimeout says otherwise.
const DefaultLockTimeout = time.Second

// oldSpoolMagic starts a spool file of the old format.
const oldSpoolMagic = "RKTSPOOL"

// Store is a durable dead-letter store: one file, a bbolt database, that
// keeps one record per message ID. Each Put is an fsync'd transaction
// (concurrent Puts share one), so a record Put returned for survives a
// crash; a crash mid-write leaves the previous state, never a torn record.
// It implements producer.DeadLetterSink. It is safe for concurrent use.
//
// Only one Store holds a file at a time, across processes: the file is
// locked while it is open, and Open waits for the lock (WithLockTimeout),
// then fails with ErrLocked, whatever path (symbolic links included) names
// the file.
//
// A damaged file never crashes a reader: Open reads every page in use
// before the engine does and refuses a file whose pages are not sound with
// ErrCorrupt (salvage its records with Salvage); each record carries a
// checksum, checked on every read.
type Store struct {
	db      *bolt.DB
	path    string
	commits commits // groups the transactions of concurrent Puts
	ledger  *ledger // nil when read-only
	// legacy says the store holds records of format 1 only (see unseal):
	// only a store opened read-only that nothing has opened for writing
	// since the records had checksums.
	legacy bool
}

// An Option configures Open.
type Option func(*openConfig) error

type openConfig struct {
	lockTimeout time.Duration
	readOnly    bool
}

// WithLockTimeout sets how long Open waits for the lock of a store that
// another process (or another Store in this one) holds, overriding the
// default of DefaultLockTimeout; d must be > 0.
func WithLockTimeout(d time.Duration) Option {
	return func(c *openConfig) error {
		if d <= 0 {
			return fmt.Errorf("deadletter: WithLockTimeout(%v): must be > 0", d)
		}
		c.lockTimeout = d
		return nil
	}
}

// WithReadOnly opens the store for reading only (Get, Scan, Len): it must
// exist, and other read-only Stores may share it, but not a writer.
func WithReadOnly() Option {
	return func(c *openConfig) error {
		c.readOnly = true
		return nil
	}
}

// Open opens the store at path, creating it (mode 0600: it holds message
// bodies) when it does not exist. A file that is not a store is refused and
// left untouched: an old spool with an error wrapping ErrOldSpool that says
// how to import it, anything else with ErrNotStore. A store whose pages are
// not sound (a truncated or damaged file: see Check) is refused with an
// error wrapping ErrCorrupt that names the first problem, and left
// untouched; Salvage copies its intact records into a new store.
func Open(path string, opts ...Option) (*Store, error) {
	c := openConfig{lockTimeout: DefaultLockTimeout}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	if path == "" {
		return nil, errors.New("deadletter: Open: path is empty")
	}
	if err := checkFile(path); err != nil {
		return nil, err
	}
	var db *bolt.DB
	legacy := false
	if info, err := os.Stat(path); err == nil && info.Size() > 0 {
		// Read-only first: bbolt reads only the meta pages, and holds the
		// lock while every other page is checked; then the real open.
		if db, err = openBolt(path, c.lockTimeout, true); err != nil {
			return nil, err
		}
		var err error
		if legacy, err = checkStructure(path); err != nil {
			db.Close()
			return nil, err
		}
		if !c.readOnly {
			db.Close()
			db = nil
		}
	}
	if db == nil {
		var err error
		if db, err = openBolt(path, c.lockTimeout, c.readOnly); err != nil {
			return nil, err
		}
	}
	s := &Store{db: db, path: path, legacy: legacy}
	if c.readOnly {
		return s, nil
	}
	err := guard(path, "open", func() error {
		return db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists(bucketRecords)
			if err != nil || !legacy {
				return err
			}
			return sealLegacy(b)
		})
	})
	s.legacy = false
	if err == nil {
		s.ledger, err = loadLedger(path + ledgerSuffix)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("deadletter: open %s: %w", path, err)
	}
	return s, nil
}

// sealLegacy seals each record of format 1 in b that passes the checks of
// format 1 (see unseal), in place: the payload is kept as it is. A value
// that does not pass is left as it is, and reads as damaged from then on.
func sealLegacy(b *bolt.Bucket) error {
	var sealed [][2][]byte
	err := b.ForEach(func(k, v []byte) error {
		if v == nil || isSealed(v) {
			return nil
		}
		if _, err := decode(k, v, true); err == nil {
			sealed = append(sealed, [2][]byte{bytes.Clone(k), seal(k, v)})
		}
		return nil
	})
	for _, kv := range sealed {
		if err == nil {
			err = b.Put(kv[0], kv[1])
		}
	}
	return err
}

// openBolt opens the bbolt file at path, naming what went wrong.
func openBolt(path string, lockTimeout time.Duration, readOnly bool) (*bolt.DB, error) {
	var db *bolt.DB
	err := guard(path, "open", func() error {
		var err error
		db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout, ReadOnly: readOnly})
		return err
	})
	switch {
	case errors.Is(err, ErrCorrupt):
		return nil, err
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s (waited %v for its lock)", ErrLocked, path, lockTimeout)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrChecksum):
		return nil, fmt.Errorf("%w: %s: %v", ErrNotStore, path, err)
	case errors.As(err, new(*fs.PathError)):
		return nil, fmt.Errorf("deadletter: %w", err) // it names the file
	case err != nil && strings.Contains(err.Error(), "file size too small"):
		// A valid meta page, but not the two pages of a store: cut short.
		return nil, fmt.Errorf("%w: %s: %v: truncated; run `rocketry spool check %s`", ErrCorrupt, path, err, path)
	case err != nil:
		return nil, fmt.Errorf("deadletter: open %s: %w", path, err)
	}
	return db, nil
}

// checkFile refuses an old spool, and says so, before bbolt sees it.
func checkFile(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deadletter: open %s: %w", path, err)
	}
	defer f.Close()
	head := make([]byte, len(oldSpoolMagic))
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return fmt.Errorf("deadletter: open %s: %w", path, err)
	}
	if n > 0 && bytes.HasPrefix([]byte(oldSpoolMagic), head[:n]) {
		return fmt.Errorf("%w: %s: import its records into a new store with `rocketry spool import %s NEW` (or Store.ImportSpool), then use NEW", ErrOldSpool, path, path)
	}
	return nil
}

// Path returns the path the store was opened with.
func (s *Store) Path() string { return s.path }

// MaxBodyBytes returns MaxBodyBytes: a Producer given the store refuses a
// WithMaxBodyBytes above it, so that every message it accepts can be kept.
func (s *Store) MaxBodyBytes() int { return MaxBodyBytes }

// Put keeps d under its message's ID, durably, before it returns. Putting
// an ID the store holds replaces its record, keeping the first DeadLetteredAt
// and, when d has none, the record's MaybeStoredAt (the message may still
// be stored there): one ID is one record. d.Message must have an ID. It
// implements producer.DeadLetterSink.
func (s *Store) Put(d *producer.DeadLetter) error {
	payload, err := encodePayload(d)
	if err != nil {
		return err
	}
	k := key(d.Message.ID)
	err = s.commits.do(s, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRecords)
		if b == nil {
			return fmt.Errorf("%w: the store has no bucket %q", ErrCorrupt, bucketRecords)
		}
		if ov := b.Get(k); ov != nil {
			if old, seq, derr := decodeSeq(k, ov, s.legacy); derr == nil {
				var err error
				if seq == 0 { // written before records were numbered
					if seq, err = b.NextSequence(); err != nil {
						return err
					}
				}
				val, err := encode(merge(old, d), seq)
				if err != nil {
					return err
				}
				return b.Put(k, val)
			}
		}
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		return b.Put(k, seal(k, withSequence(payload, seq)))
	})
	return s.wrap("put", err)
}

// view runs fn in a read transaction, guarded.
func (s *Store) view(op string, fn func(tx *bolt.Tx) error) error {
	return s.wrap(op, guard(s.path, op, func() error { return s.db.View(fn) }))
}

// update runs fn in a write transaction of its own, guarded.
func (s *Store) update(op string, fn func(tx *bolt.Tx) error) error {
	return s.wrap(op, guard(s.path, op, func() error { return s.db.Update(fn) }))
}

// Get returns the record of message ID id, or an error wrapping ErrNotFound
// (or ErrCorrupt).
func (s *Store) Get(id string) (*producer.DeadLetter, error) {
	var d *producer.DeadLetter
	k := key(id)
	err := s.view("get", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRecords)
		if b == nil {
			return fmt.Errorf("%w: %q", ErrNotFound, id)
		}
		v := b.Get(k)
		if v == nil {
			return fmt.Errorf("%w: %q", ErrNotFound, id)
		}
		var err error
		d, err = decode(k, bytes.Clone(v), s.legacy)
		return err
	})
	return d, err
}

// Delete removes the records of ids, in one transaction; an ID the store
// does not hold is skipped.
func (s *Store) Delete(ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	return s.update("delete", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRecords)
		if b == nil {
			return nil
		}
		for _, id := range ids {
			if err := b.Delete(key(id)); err != nil {
				return err
			}
		}
		return nil
	})
}

// Len returns the number of records, damaged ones included.
func (s *Store) Len() (int, error) {
	n := 0
	err := s.view("len", func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketRecords); b != nil {
			n = b.Stats().KeyN
		}
		return nil
	})
	return n, err
}

// Scan calls fn with each record, in the order of their keys (message
// IDs), until fn returns an error, which Scan returns. A record that cannot
// be read (its checksum fails, or it does not decode) is passed as a nil
// record and an error wrapping ErrCorrupt that names its key. fn runs
// inside a read transaction: it must not call the Store's methods (a write
// would wait for the transaction to end).
func (s *Store) Scan(fn func(d *producer.DeadLetter, err error) error) error {
	var ferr error
	err := s.view("scan", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRecords)
		if b == nil {
			return nil
		}
		var last []byte
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if last != nil && bytes.Compare(k, last) <= 0 {
				return fmt.Errorf("%w: key %q follows %q: keys out of order", ErrCorrupt, k, last)
			}
			last = bytes.Clone(k)
			if ferr = fn(decode(last, bytes.Clone(v), s.legacy)); ferr != nil {
				return ferr
			}
		}
		return nil
	})
	if ferr != nil && errors.Is(err, ferr) {
		return ferr // fn's own error, as it was
	}
	return err
}

// pageRecord is one record of a page read by Replay.
type pageRecord struct {
	d   *producer.DeadLetter // nil: damaged (err)
	err error
	key []byte
	sum fingerprint // of the stored value
	seq uint64      // the record's sequence (0: damaged, or written before)
}

// page returns up to n records whose keys follow after (all when after is
// nil), each strictly after the one before; the records that cannot be
// read are returned with their error.
func (s *Store) page(after []byte, n int) (recs []pageRecord, err error) {
	err = s.view("read", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRecords)
		if b == nil { // a bbolt file that is not ours, opened read-only
			return nil
		}
		c := b.Cursor()
		var k, v []byte
		if after == nil {
			k, v = c.First()
		} else if k, v = c.Seek(after); k != nil && bytes.Equal(k, after) {
			k, v = c.Next()
		}
		last := after
		for ; k != nil && len(recs) < n; k, v = c.Next() {
			if last != nil && bytes.Compare(k, last) <= 0 {
				return fmt.Errorf("%w: key %q follows %q: keys out of order", ErrCorrupt, k, last)
			}
			last = bytes.Clone(k)
			recs = append(recs, s.pageRecord(last, v))
		}
		return nil
	})
	return recs, err
}

// pageRecord reads the value v stored under k.
func (s *Store) pageRecord(k, v []byte) pageRecord {
	d, seq, err := decodeSeq(k, bytes.Clone(v), s.legacy)
	return pageRecord{d: d, err: err, key: k, sum: fingerprintOf(v), seq: seq}
}

// record reads the record under k; false when there is none.
func (s *Store) record(k []byte) (pr pageRecord, ok bool, err error) {
	err = s.view("read", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRecords)
		if b == nil {
			return nil
		}
		if v := b.Get(k); v != nil {
			pr, ok = s.pageRecord(k, v), true
		}
		return nil
	})
	return pr, ok, err
}

// Close closes the store and releases its lock. Close is idempotent.
func (s *Store) Close() error {
	return s.wrap("close", guard(s.path, "close", s.db.Close))
}

// wrap names the store in a bbolt error.
func (s *Store) wrap(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, berrors.ErrDatabaseNotOpen):
		return fmt.Errorf("deadletter: %s %s: %w", op, s.path, ErrClosed)
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrCorrupt), errors.Is(err, ErrTooLarge), errors.Is(err, producer.ErrInvalidMessage):
		return err
	}
	return fmt.Errorf("deadletter: %s %s: %w", op, s.path, err)
}
