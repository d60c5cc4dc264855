package deadletter

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// CheckReport is what Check (or Salvage) found in a store file.
type CheckReport struct {
	// Path is the store file.
	Path string `json:"path"`
	// FileBytes is the file's size, PageSize its pages' and PagesInUse how
	// many pages its meta page says are in use.
	FileBytes  int64  `json:"file_bytes"`
	PageSize   int    `json:"page_size"`
	PagesInUse uint64 `json:"pages_in_use"`
	// Txid is the transaction of the meta page in use.
	Txid uint64 `json:"txid"`
	// Records is how many records are intact: their checksum holds (or, in
	// the format before checksums, they decode) and their ID is their key.
	Records int `json:"records"`
	// Unchecked is how many of Records are of the format before checksums:
	// read with the checks they always had.
	Unchecked int `json:"unchecked,omitempty"`
	// Delivered is how many of Records the delivered ledger lists: a replay
	// delivered them, and a rollback of the store brought them back. A
	// replay deletes them without sending; Salvage does not copy them.
	Delivered int `json:"delivered,omitempty"`
	// Damaged lists the records that are not intact, by key (what could be
	// read of the ID), with why.
	Damaged []DamagedRecord `json:"damaged,omitempty"`
	// LostPages is how many pages of records could not be read (out of the
	// file, of the wrong type, not sound): their records are absent, and
	// not counted anywhere else.
	LostPages int `json:"lost_pages,omitempty"`
	// Problems says what is wrong with the file's pages, each naming its
	// page; Open refuses a store with any.
	Problems []string `json:"problems,omitempty"`
	// MetaNote, when not empty, says that the meta page not in use is
	// damaged: the store is read as of the other one. A crash during a
	// commit leaves the same; the next write repairs it.
	MetaNote string `json:"meta_note,omitempty"`
}

// DamagedRecord is a record Check found damaged: its key (what could be
// read of its message ID) and what is wrong.
type DamagedRecord struct {
	Key   string `json:"key"`
	Error string `json:"error"`
}

// Intact says whether Check found nothing damaged.
func (r *CheckReport) Intact() bool {
	return len(r.Damaged) == 0 && r.LostPages == 0 && len(r.Problems) == 0 && r.MetaNote == ""
}

// Check reads every page in use of the store file at path and every record,
// without the engine (as bbolt's own check does, but a damaged page is
// reported, never followed), and says what is intact and what is damaged.
// It changes nothing. The error is for a file that cannot be read at all
// (missing, locked by a writer for longer than DefaultLockTimeout, an old
// spool); damage is in the report.
func Check(path string) (*CheckReport, error) {
	rep, err := walkStore(path, DefaultLockTimeout, nil)
	return rep, err
}

// walkStore walks the store at path under its shared lock (when bbolt can
// take it: a file bbolt refuses is walked without), reporting each intact
// record that is not a delivered one to keep.
func walkStore(path string, lockTimeout time.Duration, keep func(k, v []byte)) (*CheckReport, error) {
	if err := checkFile(path); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("deadletter: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("deadletter: %w", err)
	}
	if db, err := openBolt(path, lockTimeout, true); err == nil {
		defer db.Close()
	} else if errors.Is(err, ErrLocked) || errors.As(err, new(*fs.PathError)) {
		return nil, err
	}
	led, err := loadLedger(path + ledgerSuffix)
	if err != nil {
		return nil, err
	}
	// A first walk says whether the store is a legacy one (see unseal),
	// before any record is judged.
	legacy := walkFile(f, info.Size(), nil, nil).legacy()
	rep := &CheckReport{Path: path, FileBytes: info.Size()}
	pr := walkFile(f, info.Size(), func(k, v []byte) {
		if _, derr := decode(k, v, legacy); derr != nil {
			rep.Damaged = append(rep.Damaged, DamagedRecord{Key: string(k), Error: derr.(*RecordError).Reason})
			return
		}
		rep.Records++
		if _, unchecked, _ := unseal(k, v, legacy); unchecked {
			rep.Unchecked++
		}
		if led.delivered(k, fingerprintOf(v)) {
			rep.Delivered++
			return
		}
		if keep != nil {
			keep(k, v)
		}
	}, func(k []byte, why string) {
		rep.Damaged = append(rep.Damaged, DamagedRecord{Key: string(k), Error: why})
	})
	rep.PageSize, rep.PagesInUse, rep.Txid = int(pr.pageSize), pr.meta.pgid, pr.meta.txid
	rep.Problems, rep.LostPages, rep.MetaNote = pr.problems, pr.lost, pr.metaNote
	if pr.err != nil {
		rep.Problems = append([]string{pr.err.Error()}, rep.Problems...)
	}
	return rep, nil
}

// SalvageResult says what Salvage did.
type SalvageResult struct {
	// Report is what the walk of the damaged store found.
	Report *CheckReport
	// Copied is how many records were put into the new store: the intact
	// ones, less those the delivered ledger lists (Report.Delivered) and
	// keys found twice.
	Copied int
}

// Salvage copies every intact record of the store file at src into a new
// store at dst (which must not exist), as bbolt's compact does, but reading
// src without the engine, so that a damaged page is skipped, never
// followed: what is left out is in the result's Report (damaged records by
// key, pages lost, records already delivered). Each record is copied as
// stored, its checksum with it (a record of format 1, from a store of
// format 1 only, is sealed on the way). src is not changed.
func Salvage(src, dst string) (SalvageResult, error) {
	var res SalvageResult
	if _, err := os.Lstat(dst); err == nil {
		return res, fmt.Errorf("deadletter: salvage: %s exists: name a new file", dst)
	}
	out, err := Open(dst)
	if err != nil {
		return res, err
	}
	seen := map[string]bool{}
	var batch [][2][]byte
	var werr error
	flush := func() {
		if werr != nil || len(batch) == 0 {
			return
		}
		werr = out.update("salvage", func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketRecords)
			for _, kv := range batch {
				if err := b.Put(kv[0], kv[1]); err != nil {
					return err
				}
			}
			return nil
		})
		batch = batch[:0]
	}
	rep, err := walkStore(src, DefaultLockTimeout, func(k, v []byte) {
		if seen[string(k)] {
			return
		}
		seen[string(k)] = true
		res.Copied++
		if !isSealed(v) { // intact: of a legacy store
			v = seal(k, v)
		}
		batch = append(batch, [2][]byte{k, v})
		if len(batch) >= 256 {
			flush()
		}
	})
	flush()
	res.Report = rep
	if cerr := out.Close(); werr == nil {
		werr = cerr
	}
	if err == nil && werr != nil {
		err = fmt.Errorf("deadletter: salvage into %s: %w", dst, werr)
	}
	if err != nil {
		res.Copied = 0
		_ = os.Remove(dst)
		return res, err
	}
	return res, nil
}

// pageReport is what a walk found, without the records.
type pageReport struct {
	meta     meta
	metaPage int
	pageSize uint64
	metaNote string
	problems []string
	lost     int
	err      error // the file cannot be read as a store at all

	sealed, unsealed int // records read as format 2, as format 1
}

// legacy says whether the walk found records of format 1 only.
func (r pageReport) legacy() bool { return r.sealed == 0 && r.unsealed > 0 }

// walkFile walks the file f of size bytes, calling onRecord with each
// record of the records bucket.
func walkFile(f io.ReaderAt, size int64, onRecord func(k, v []byte), onDamaged func(k []byte, why string)) pageReport {
	w := &walker{r: f, size: size, onRecord: onRecord, onDamaged: onDamaged}
	err := w.walk()
	if w.dropped > 0 {
		w.problems = append(w.problems, fmt.Sprintf("and %d more problems", w.dropped))
	}
	return pageReport{meta: w.meta, metaPage: w.metaPage, pageSize: w.pageSize, metaNote: w.metaNote, problems: w.problems, lost: w.lostPages, err: err,
		sealed: w.sealed, unsealed: w.unsealed}
}

// checkStructure walks the file at path and returns an error wrapping
// ErrCorrupt that names the first problem, nil when every page is sound;
// legacy says whether the store's records are all of format 1 (see
// unseal).
func checkStructure(path string) (legacy bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("deadletter: open %s: %w", path, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("deadletter: open %s: %w", path, err)
	}
	rep := walkFile(f, info.Size(), nil, nil)
	switch {
	case rep.err != nil:
		return false, fmt.Errorf("%w: %s: %v; run `rocketry spool check %s`", ErrCorrupt, path, rep.err, path)
	case len(rep.problems) > 0:
		more := ""
		if len(rep.problems) > 1 {
			more = fmt.Sprintf(" (and %d more)", len(rep.problems)-1)
		}
		return false, fmt.Errorf("%w: %s: %s%s; `rocketry spool check %s` says what is damaged, `rocketry spool salvage %s NEW` copies its intact records into a new store",
			ErrCorrupt, path, rep.problems[0], more, path, path)
	}
	return rep.legacy(), nil
}
