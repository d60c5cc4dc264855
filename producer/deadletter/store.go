package deadletter

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"

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
type Store struct {
	db   *bolt.DB
	path string
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
// how to import it, anything else with ErrNotStore.
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
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: c.lockTimeout, ReadOnly: c.readOnly})
	switch {
	case errors.Is(err, bolt.ErrTimeout):
		return nil, fmt.Errorf("%w: %s (waited %v for its lock)", ErrLocked, path, c.lockTimeout)
	case errors.Is(err, bolt.ErrInvalid), errors.Is(err, bolt.ErrVersionMismatch), errors.Is(err, bolt.ErrChecksum):
		return nil, fmt.Errorf("%w: %s: %v", ErrNotStore, path, err)
	case errors.As(err, new(*fs.PathError)):
		return nil, fmt.Errorf("deadletter: %w", err) // it names the file
	case err != nil:
		return nil, fmt.Errorf("deadletter: open %s: %w", path, err)
	}
	db.MaxBatchDelay = 2 * time.Millisecond
	s := &Store{db: db, path: path}
	if !c.readOnly {
		err = db.Update(func(tx *bolt.Tx) error {
			_, err := tx.CreateBucketIfNotExists(bucketRecords)
			return err
		})
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("deadletter: open %s: %w", path, err)
		}
	}
	return s, nil
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
// an ID the store holds replaces its record, keeping the first SpooledAt
// and, when d has none, the record's MaybeStoredAt (the message may still
// be stored there): one ID is one record. d.Message must have an ID. It
// implements producer.DeadLetterSink.
func (s *Store) Put(d *producer.DeadLetter) error {
	v, err := encode(d)
	if err != nil {
		return err
	}
	k := key(d.Message.ID)
	err = s.db.Batch(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRecords)
		val := v
		if ov := b.Get(k); ov != nil {
			if old, derr := decode(k, ov); derr == nil {
				m := merge(old, d)
				if val, derr = encode(m); derr != nil {
					return derr
				}
			}
		}
		return b.Put(k, val)
	})
	return s.wrap("put", err)
}

// Get returns the record of message ID id, or an error wrapping ErrNotFound
// (or ErrCorrupt).
func (s *Store) Get(id string) (*producer.DeadLetter, error) {
	var d *producer.DeadLetter
	k := key(id)
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRecords)
		if b == nil {
			return fmt.Errorf("%w: %q", ErrNotFound, id)
		}
		v := b.Get(k)
		if v == nil {
			return fmt.Errorf("%w: %q", ErrNotFound, id)
		}
		var err error
		d, err = decode(k, bytes.Clone(v))
		return err
	})
	return d, s.wrap("get", err)
}

// Delete removes the records of ids, in one transaction; an ID the store
// does not hold is skipped.
func (s *Store) Delete(ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRecords)
		for _, id := range ids {
			if err := b.Delete(key(id)); err != nil {
				return err
			}
		}
		return nil
	})
	return s.wrap("delete", err)
}

// Len returns the number of records.
func (s *Store) Len() (int, error) {
	n := 0
	err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketRecords); b != nil {
			n = b.Stats().KeyN
		}
		return nil
	})
	return n, s.wrap("len", err)
}

// Scan calls fn with each record, in the order of their keys (message
// IDs), until fn returns an error, which Scan returns. A record that cannot
// be read is passed as a nil record and an error wrapping ErrCorrupt that
// names its key. fn runs inside a read transaction: it must not call the
// Store's methods (a write would wait for the transaction to end).
func (s *Store) Scan(fn func(d *producer.DeadLetter, err error) error) error {
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRecords)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			return fn(decode(k, bytes.Clone(v)))
		})
	})
	return s.wrap("scan", err)
}

// page returns up to n records whose keys follow after (all when after is
// nil), and the last key read; bad holds the errors of the records that
// cannot be read, which are skipped.
func (s *Store) page(after []byte, n int) (recs []*producer.DeadLetter, bad []error, last []byte, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
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
		for ; k != nil && len(recs)+len(bad) < n; k, v = c.Next() {
			last = bytes.Clone(k)
			d, derr := decode(k, bytes.Clone(v))
			if derr != nil {
				bad = append(bad, derr)
				continue
			}
			recs = append(recs, d)
		}
		return nil
	})
	return recs, bad, last, s.wrap("read", err)
}

// Close closes the store and releases its lock. Close is idempotent.
func (s *Store) Close() error {
	return s.wrap("close", s.db.Close())
}

// wrap names the store in a bbolt error.
func (s *Store) wrap(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, bolt.ErrDatabaseNotOpen):
		return fmt.Errorf("deadletter: %s %s: %w", op, s.path, ErrClosed)
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrCorrupt), errors.Is(err, ErrTooLarge), errors.Is(err, producer.ErrInvalidMessage):
		return err
	}
	return fmt.Errorf("deadletter: %s %s: %w", op, s.path, err)
}
