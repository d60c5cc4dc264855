package deadletter

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// The delivered ledger, FILE.delivered beside the store FILE, says which
// records a replay delivered (the broker stored them) and then deleted. It
// exists for one kind of damage: a store whose current meta page is damaged
// is read by bbolt as of the transaction before, so the records deleted by
// the last transaction come back; without the ledger a replay would send
// them again (a second copy on a broker that does not deduplicate, such as
// RocketMQ). The ledger is a file of its own so that the rollback does not
// take it along.
//
// Replay appends, fsyncs, and only then deletes, in the delete's
// transaction, one entry per record: the transaction's ID, the record's key
// and a fingerprint of its stored value (SHA-256, 16 bytes). A record found
// in the store with the key and fingerprint of an entry was delivered: it
// is deleted, not sent. A record put again under the same ID differs (its
// time, its attempts), so it is sent.
//
// An entry of transaction T is needed while the store still holds the meta
// page of T-1, that is until a transaction after T commits; Replay drops
// the older entries when it starts and ends, so the ledger holds about the
// last page of a replay.
//
// Format: "RKDELIV1", then frames: length uint32 | CRC-32C of payload uint32
// | payload (txid uint64 | fingerprint [16]byte | key). Reading stops at the
// first bad frame (a torn append); what follows is not trusted.
const (
	ledgerMagic     = "RKDELIV1"
	ledgerSuffix    = ".delivered"
	ledgerEntryBase = 8 + 16
)

type fingerprint [16]byte

func fingerprintOf(v []byte) fingerprint {
	s := sha256.Sum256(v)
	return fingerprint(s[:16])
}

type ledgerEntry struct {
	txid uint64
	key  string
	sum  fingerprint
}

// ledger is the delivered ledger of one store. It is safe for concurrent
// use.
type ledger struct {
	path    string
	syncDir func(dir string) error // syncDir (a test's spy)
	mu      sync.Mutex
	entries map[string][]ledgerEntry // by key
	bad     bool                     // the file has a bad frame: rewrite it before appending
}

// loadLedger reads the ledger at path; a missing file is an empty ledger.
func loadLedger(path string) (*ledger, error) {
	l := &ledger{path: path, syncDir: syncDir, entries: map[string][]ledgerEntry{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("deadletter: delivered ledger: %w", err)
	}
	es, ok := parseLedger(data)
	for _, e := range es {
		l.entries[e.key] = append(l.entries[e.key], e)
	}
	l.bad = !ok
	return l, nil
}

// parseLedger reads the entries of a ledger file up to its first bad frame;
// ok is false when there is one.
func parseLedger(data []byte) (es []ledgerEntry, ok bool) {
	if len(data) < len(ledgerMagic) || string(data[:len(ledgerMagic)]) != ledgerMagic {
		return nil, len(data) == 0
	}
	le := binary.LittleEndian
	for off := len(ledgerMagic); off < len(data); {
		if len(data)-off < 8 {
			return es, false
		}
		n := int(le.Uint32(data[off:]))
		if n < ledgerEntryBase+1 || n > len(data)-off-8 {
			return es, false
		}
		p := data[off+8 : off+8+n]
		if crc32.Checksum(p, castagnoli) != le.Uint32(data[off+4:]) {
			return es, false
		}
		es = append(es, ledgerEntry{txid: le.Uint64(p), sum: fingerprint(p[8:24]), key: string(p[24:])})
		off += 8 + n
	}
	return es, true
}

func appendFrame(b []byte, e ledgerEntry) []byte {
	p := binary.LittleEndian.AppendUint64(nil, e.txid)
	p = append(append(p, e.sum[:]...), e.key...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(p)))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(p, castagnoli))
	return append(b, p...)
}

// delivered says whether the record stored under k with a value of
// fingerprint sum was delivered by a replay.
func (l *ledger) delivered(k []byte, sum fingerprint) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.entries[string(k)] {
		if e.sum == sum {
			return true
		}
	}
	return false
}

// add appends es to the file and fsyncs it; when the file is new (empty),
// its directory too, so that the file's entry in it survives a crash.
func (l *ledger) add(es []ledgerEntry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bad {
		if err := l.rewriteLocked(0); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("deadletter: delivered ledger: %w", err)
	}
	var b []byte
	fresh := false // made by this OpenFile (or left empty by an earlier one)
	if info, err := f.Stat(); err == nil && info.Size() == 0 {
		b, fresh = []byte(ledgerMagic), true
	}
	for _, e := range es {
		b = appendFrame(b, e)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && fresh {
		err = l.syncDir(filepath.Dir(l.path))
	}
	if err != nil {
		l.bad = true // a torn append: rewritten before the next
		return fmt.Errorf("deadletter: delivered ledger: %w", err)
	}
	for _, e := range es {
		l.entries[e.key] = append(l.entries[e.key], e)
	}
	return nil
}

// compact drops the entries of transactions before current, the
// transaction of the store's meta page in use: the store no longer holds a
// meta page from before them.
func (l *ledger) compact(current uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	drop := l.bad
	for _, es := range l.entries {
		for _, e := range es {
			drop = drop || e.txid < current
		}
	}
	if !drop {
		return nil
	}
	return l.rewriteLocked(current)
}

// rewriteLocked writes the entries of transactions from current on into a
// new file that replaces the ledger (or removes it when none is left).
func (l *ledger) rewriteLocked(current uint64) error {
	var b []byte
	kept := map[string][]ledgerEntry{}
	for k, es := range l.entries {
		for _, e := range es {
			if e.txid >= current {
				kept[k] = append(kept[k], e)
				b = appendFrame(b, e)
			}
		}
	}
	if len(b) == 0 {
		if err := os.Remove(l.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("deadletter: delivered ledger: %w", err)
		}
		l.entries, l.bad = kept, false
		return nil
	}
	tmp := l.path + ".tmp"
	err := writeSynced(tmp, append([]byte(ledgerMagic), b...))
	if err == nil {
		err = os.Rename(tmp, l.path)
	}
	if err == nil {
		err = l.syncDir(filepath.Dir(l.path))
	}
	if err != nil {
		return fmt.Errorf("deadletter: delivered ledger: %w", err)
	}
	l.entries, l.bad = kept, false
	return nil
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
