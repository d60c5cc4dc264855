package producer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ReplayResult counts what ReplaySpool did.
type ReplayResult struct {
	// Read is how many intact records the spool held.
	Read int
	// Stored is how many were sent without error (already-stored ones, which
	// the broker recognises by ID, included) and removed from the spool.
	Stored int
	// Failed is how many were kept in the spool: their send failed, or the
	// context ended before they were sent.
	Failed int
	// Corrupt says the spool held torn or corrupt bytes; they were saved to
	// a "<spool>.corrupt-*" file and left out of the rewritten spool.
	Corrupt bool
}

// ReplaySpool sends each intact record of the spool at path with send,
// keeping its message ID so a broker that already stored it does not store
// it again, then atomically replaces the spool (a temporary file in the same
// directory, fsync, rename, fsync of the directory) with one holding only
// the records whose send failed, byte for byte as they were. A crash at any
// point leaves either the old spool or the new one; resending the old one is
// harmless, since the broker deduplicates by ID, so replaying twice stores
// nothing twice.
//
// The error is nil when the spool was read and rewritten, even if some sends
// failed (see ReplayResult.Failed). When the spool held torn or corrupt
// bytes, every intact record is still replayed, the original file is saved
// as "<spool>.corrupt-*", and the error wraps ErrSpoolCorrupt. When ctx ends,
// the records not yet sent are kept and ctx's error is returned. A file that
// is not a spool is left untouched.
//
// The spool must not be open for appending meanwhile (in this process it is
// refused).
func ReplaySpool(ctx context.Context, path string, send func(context.Context, *Message) error) (ReplayResult, error) {
	var res ReplayResult
	if send == nil {
		return res, errors.New("producer: ReplaySpool: send is nil")
	}
	abs, err := claimSpool(path)
	if err != nil {
		return res, err
	}
	defer openSpools.Delete(abs)

	data, err := os.ReadFile(path)
	if err != nil {
		return res, fmt.Errorf("producer: replay spool: %w", err)
	}
	p, err := parseSpool(data)
	if err != nil {
		return res, fmt.Errorf("producer: replay spool %s: %w", path, err)
	}
	res.Read = len(p.recs)
	res.Corrupt = len(p.bad) > 0

	var keep [][]byte
	for i, r := range p.recs {
		if ctx.Err() != nil {
			keep = append(keep, p.frames[i:]...)
			res.Failed += len(p.recs) - i
			break
		}
		if err := send(ctx, r.Message); err != nil {
			keep = append(keep, p.frames[i])
			res.Failed++
			continue
		}
		res.Stored++
	}

	var errs []error
	if res.Corrupt {
		copyPath, err := saveCorrupt(path, data)
		if err != nil {
			// Keep the file as it is: the bad bytes must not be lost.
			return res, fmt.Errorf("producer: replay spool %s: save the corrupt spool: %w (spool not rewritten)", path, err)
		}
		errs = append(errs, fmt.Errorf("%w; original saved as %s", p.corruptError(path), copyPath))
	}
	if res.Stored > 0 || res.Corrupt || p.tornHeader {
		if _, err := rewriteSpool(path, keep); err != nil {
			errs = append(errs, fmt.Errorf("producer: replay spool %s: rewrite: %w", path, err))
		}
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

// saveCorrupt copies data, fsync'd, to a new file next to path named
// "<base>.corrupt-*" and returns its path.
func saveCorrupt(path string, data []byte) (string, error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".corrupt-*")
	if err != nil {
		return "", err
	}
	name := f.Name()
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(name)
		return "", err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(name)
		return "", err
	}
	if err := f.Close(); err != nil {
		os.Remove(name)
		return "", err
	}
	return name, syncDir(dir)
}

// rewriteSpool atomically replaces the spool at path with a header and
// frames, and returns the new file's size.
func rewriteSpool(path string, frames [][]byte) (int64, error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return 0, err
	}
	tmp := f.Name()
	fail := func(err error) (int64, error) {
		f.Close()
		os.Remove(tmp)
		return 0, err
	}
	w := bufio.NewWriterSize(f, 64<<10)
	size := int64(spoolHeaderSize)
	w.Write(spoolHeader())
	for _, fr := range frames {
		w.Write(fr)
		size += int64(len(fr))
	}
	if err := w.Flush(); err != nil { // bufio keeps the first write error
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return 0, err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return 0, err
	}
	return size, syncDir(dir)
}

// syncDir makes a directory's entries (a created or renamed file) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
