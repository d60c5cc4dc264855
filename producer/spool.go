package producer

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// openSpools holds the absolute paths of the spools open in this process
// (by OpenSpool, or being rewritten by ReplaySpool): two writers on one file
// would overwrite each other's records.
var openSpools sync.Map

func claimSpool(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("producer: spool %s: %w", path, err)
	}
	if _, busy := openSpools.LoadOrStore(abs, true); busy {
		return "", fmt.Errorf("producer: spool %s is already open in this process", path)
	}
	return abs, nil
}

// Spool is an append-only dead-letter file: one record per message whose
// attempts were spent, each written with one write and made durable with
// fsync before Append returns. It is safe for concurrent use.
//
// Only one Spool (or ReplaySpool) may use a file at a time; OpenSpool
// refuses a file already open in the same process, and nothing guards
// against another process: do not replay a spool while a producer appends
// to it.
type Spool struct {
	path string
	abs  string

	// syncMu serialises fsyncs; it is taken before mu, never after.
	syncMu sync.Mutex
	synced uint64 // records made durable; guarded by syncMu

	mu     sync.Mutex
	f      *os.File // nil once closed
	size   int64    // bytes of header and records written: where the next record goes
	writes uint64   // records written
	broken error    // set after an fsync failure: no further appends

	recovered error
}

// OpenSpool opens the spool at path for appending, creating it (mode 0600,
// it holds message bodies) when it does not exist.
//
// A file that is not a spool (wrong magic or version) is refused and left
// untouched. A spool with a torn or corrupt record, as a crash during an
// append leaves, is repaired before any append, and nothing is lost: the
// original bytes are first copied, fsync'd, to a new file next to it named
// "<spool>.corrupt-*", then the spool is rewritten atomically with every
// intact record (before and after the bad bytes) so that appends continue
// right after the last intact record. Recovered reports what was done.
// Appending after unreadable bytes without this repair would leave new
// records behind garbage.
func OpenSpool(path string) (*Spool, error) {
	abs, err := claimSpool(path)
	if err != nil {
		return nil, err
	}
	s, err := openSpool(path, abs)
	if err != nil {
		openSpools.Delete(abs)
		return nil, err
	}
	return s, nil
}

func openSpool(path, abs string) (*Spool, error) {
	s := &Spool{path: path, abs: abs}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("producer: open spool: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("producer: open spool: %w", err)
	}
	p, err := parseSpool(data)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("producer: open spool %s: %w", path, err)
	}
	switch {
	case len(data) == 0 || p.tornHeader:
		// New, or created by a process that crashed before its header was
		// durable: it holds no record.
		if err := writeHeader(f, filepath.Dir(path)); err != nil {
			f.Close()
			return nil, fmt.Errorf("producer: open spool %s: %w", path, err)
		}
		s.size = int64(spoolHeaderSize)
	case len(p.bad) > 0:
		f.Close()
		copyPath, err := saveCorrupt(path, data)
		if err != nil {
			return nil, fmt.Errorf("producer: open spool %s: save the corrupt spool: %w", path, err)
		}
		size, err := rewriteSpool(path, p.frames)
		if err != nil {
			return nil, fmt.Errorf("producer: open spool %s: repair: %w", path, err)
		}
		s.recovered = fmt.Errorf("%w; repaired, original saved as %s", p.corruptError(path), copyPath)
		if f, err = os.OpenFile(path, os.O_RDWR, 0); err != nil {
			return nil, fmt.Errorf("producer: open spool: %w", err)
		}
		s.size = size
	default:
		s.size = int64(len(data))
	}
	s.f = f
	return s, nil
}

func writeHeader(f *os.File, dir string) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt(spoolHeader(), 0); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return syncDir(dir)
}

// Recovered returns nil when the spool was intact when opened. Otherwise it
// returns an error wrapping ErrSpoolCorrupt that says where the bad bytes
// were and where the original file was saved; the spool has been repaired
// and is ready for appends. Callers should log it.
func (s *Spool) Recovered() error { return s.recovered }

// Path returns the path the spool was opened with.
func (s *Spool) Path() string { return s.path }

// Append writes r as one record and fsyncs the file before it returns.
// r.Message must have an ID. A zero r.SpooledAt becomes the current time.
// Concurrent appends share fsyncs (group commit): each returns once an
// fsync that began after its write has succeeded.
//
// A record that fails to be written is cut off again, so the spool stays
// readable. After a failed fsync the data's fate is unknown (the kernel may
// have dropped it), so the spool refuses every later append with that error.
func (s *Spool) Append(r SpoolRecord) error {
	if r.SpooledAt.IsZero() {
		r.SpooledAt = time.Now()
	}
	frame, err := encodeFrame(&r)
	if err != nil {
		return err
	}
	s.mu.Lock()
	switch {
	case s.f == nil:
		s.mu.Unlock()
		return fmt.Errorf("producer: spool %s: %w", s.path, os.ErrClosed)
	case s.broken != nil:
		s.mu.Unlock()
		return s.broken
	}
	if _, err := s.f.WriteAt(frame, s.size); err != nil {
		if terr := s.f.Truncate(s.size); terr != nil {
			s.broken = fmt.Errorf("producer: spool %s: append failed (%v) and could not be undone: %w", s.path, err, terr)
		}
		s.mu.Unlock()
		return fmt.Errorf("producer: spool %s: append: %w", s.path, err)
	}
	s.size += int64(len(frame))
	s.writes++
	seq := s.writes
	s.mu.Unlock()
	return s.syncTo(seq)
}

// syncTo returns once record seq is durable, running an fsync for it and
// every record written before the fsync starts unless one already did.
func (s *Spool) syncTo(seq uint64) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if s.synced >= seq {
		return nil
	}
	s.mu.Lock()
	f, target, broken := s.f, s.writes, s.broken
	s.mu.Unlock()
	if broken != nil {
		return broken
	}
	if f == nil { // cannot happen: Close syncs every write first
		return fmt.Errorf("producer: spool %s: %w", s.path, os.ErrClosed)
	}
	if err := f.Sync(); err != nil {
		s.mu.Lock()
		if s.broken == nil {
			s.broken = fmt.Errorf("producer: spool %s: fsync failed, no further appends: %w", s.path, err)
		}
		broken = s.broken
		s.mu.Unlock()
		return broken
	}
	s.synced = target
	return nil
}

// Close makes every written record durable and closes the file. Appends
// after Close fail with an error wrapping os.ErrClosed. Close is
// idempotent.
func (s *Spool) Close() error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	var err error
	if s.synced < s.writes && s.broken == nil {
		if err = s.f.Sync(); err == nil {
			s.synced = s.writes
		} else {
			s.broken = fmt.Errorf("producer: spool %s: fsync failed, no further appends: %w", s.path, err)
		}
	}
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	s.f = nil
	openSpools.Delete(s.abs)
	if err != nil {
		return fmt.Errorf("producer: close spool %s: %w", s.path, err)
	}
	return nil
}
