package producer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// The spool file format, version 1. All integers are little-endian.
//
//	file:    header record*
//	header:  "RKTSPOOL" (8 bytes) | version uint32 (= 1)
//	record:  length uint32 | CRC-32C (Castagnoli) of payload uint32 | payload
//	payload: proto.Marshal(rocketryv1.SpoolRecord), 1 to MaxSpoolRecordBytes bytes
//
// A record is intact when its length is in range, it lies wholly inside the
// file, its CRC matches, and its payload decodes to a SpoolRecord with a
// message that has an ID. Anything else is a torn or corrupt record.
const (
	spoolMagic      = "RKTSPOOL"
	spoolVersion    = 1
	spoolHeaderSize = len(spoolMagic) + 4
	frameHeaderSize = 8

	// MaxSpoolRecordBytes is the largest payload of one spool record: 64 MiB.
	// A length above it is corruption, so a damaged length field never makes
	// a reader allocate a huge buffer.
	MaxSpoolRecordBytes = 64 << 20
)

// ErrSpoolCorrupt is returned, wrapped with the spool's path and the byte
// offset of the first bad record, when a spool holds a torn or corrupt
// record (or does not start with a spool header). The intact records are
// still returned or kept; see ReadSpool, OpenSpool and ReplaySpool.
//
// It lives here rather than in errors.go because the spool is its only
// source.
var ErrSpoolCorrupt = errors.New("producer: spool corrupt")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SpoolRecord is one message of a dead-letter spool, with why it is there.
type SpoolRecord struct {
	// Message is required and must have an ID: replay resends it with that
	// ID, so a broker that already stored it does not store it again.
	Message *Message
	// Err is the last cause, as text.
	Err string
	// Attempts is how many attempts were made (attempts, not retries: the
	// first one counts).
	Attempts int
	// Code is the last broker code, CODE_UNSPECIFIED when none was known.
	Code rocketryv1.Code
	// SpooledAt is when the record was spooled. Append sets it to the
	// current time when it is zero.
	SpooledAt time.Time
}

func (r *SpoolRecord) toProto() *rocketryv1.SpoolRecord {
	attempts := min(max(r.Attempts, math.MinInt32), math.MaxInt32)
	pb := &rocketryv1.SpoolRecord{
		Message:  r.Message.toProto(),
		Error:    strings.ToValidUTF8(r.Err, "\uFFFD"), // proto strings must be UTF-8
		Attempts: int32(attempts),
		Code:     r.Code,
	}
	if !r.SpooledAt.IsZero() {
		pb.SpooledAt = timestamppb.New(r.SpooledAt)
	}
	return pb
}

func spoolRecordFromProto(pb *rocketryv1.SpoolRecord) SpoolRecord {
	r := SpoolRecord{
		Message:  messageFromProto(pb.GetMessage()),
		Err:      pb.GetError(),
		Attempts: int(pb.GetAttempts()),
		Code:     pb.GetCode(),
	}
	if pb.SpooledAt != nil {
		r.SpooledAt = pb.GetSpooledAt().AsTime()
	}
	return r
}

// encodeFrame makes one framed record.
func encodeFrame(r *SpoolRecord) ([]byte, error) {
	switch {
	case r.Message == nil:
		return nil, errors.New("producer: spool record has no message")
	case r.Message.ID == "":
		return nil, errors.New("producer: spool record's message has no ID (replay could not be deduplicated)")
	}
	pb := r.toProto()
	size := proto.Size(pb)
	if size > MaxSpoolRecordBytes {
		return nil, fmt.Errorf("producer: spool record is %d bytes, over the limit of %d", size, MaxSpoolRecordBytes)
	}
	buf := make([]byte, frameHeaderSize, frameHeaderSize+size)
	buf, err := proto.MarshalOptions{}.MarshalAppend(buf, pb)
	if err != nil {
		return nil, fmt.Errorf("producer: spool record: %w", err)
	}
	payload := buf[frameHeaderSize:]
	binary.LittleEndian.PutUint32(buf[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(buf[4:8], crc32.Checksum(payload, castagnoli))
	return buf, nil
}

// decodeFrame reads the record at the start of b; ok is false when it is
// not intact. n is the frame's size.
func decodeFrame(b []byte) (r SpoolRecord, n int, ok bool) {
	if len(b) < frameHeaderSize {
		return r, 0, false
	}
	size := binary.LittleEndian.Uint32(b[0:4])
	if size == 0 || size > MaxSpoolRecordBytes || uint64(size) > uint64(len(b)-frameHeaderSize) {
		return r, 0, false
	}
	payload := b[frameHeaderSize : frameHeaderSize+int(size)]
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(b[4:8]) {
		return r, 0, false
	}
	var pb rocketryv1.SpoolRecord
	if err := proto.Unmarshal(payload, &pb); err != nil || pb.GetMessage() == nil || pb.GetMessage().GetMessageId() == "" {
		return r, 0, false
	}
	return spoolRecordFromProto(&pb), frameHeaderSize + int(size), true
}

func spoolHeader() []byte {
	h := make([]byte, spoolHeaderSize)
	copy(h, spoolMagic)
	binary.LittleEndian.PutUint32(h[len(spoolMagic):], spoolVersion)
	return h
}

// badRange is a run of bytes [off, end) that holds no intact record.
type badRange struct{ off, end int }

// parsedSpool is what parseSpool found in a spool's bytes.
type parsedSpool struct {
	recs   []SpoolRecord
	frames [][]byte // frames[i] is the raw frame of recs[i], sharing the input
	bad    []badRange
	// tornHeader: the file is shorter than a header and a prefix of one (a
	// crash while the spool was created); it holds no record.
	tornHeader bool
}

// headerError says the bytes are not a spool this code can read; nothing in
// them may be touched.
type headerError struct{ err error }

func (e *headerError) Error() string { return e.err.Error() }
func (e *headerError) Unwrap() error { return e.err }

// parseSpool reads every intact record of a spool. After a bad record it
// looks for the next intact one byte by byte, so a damaged record in the
// middle costs that record only, and the bad bytes are listed in bad. The
// only error is a *headerError.
func parseSpool(data []byte) (parsedSpool, error) {
	var p parsedSpool
	hdr := spoolHeader()
	if len(data) < spoolHeaderSize {
		if bytes.HasPrefix(hdr, data) {
			p.tornHeader = len(data) > 0
			return p, nil
		}
		return p, &headerError{fmt.Errorf("%w at byte offset 0: not a rocketry spool (no header)", ErrSpoolCorrupt)}
	}
	if string(data[:len(spoolMagic)]) != spoolMagic {
		return p, &headerError{fmt.Errorf("%w at byte offset 0: not a rocketry spool (bad magic)", ErrSpoolCorrupt)}
	}
	if v := binary.LittleEndian.Uint32(data[len(spoolMagic):spoolHeaderSize]); v != spoolVersion {
		return p, &headerError{fmt.Errorf("producer: spool version %d is not supported (this code reads version %d)", v, spoolVersion)}
	}
	// budget bounds the CRC work spent looking for the next intact record
	// after a bad one, so crafted bytes cannot make reading quadratic.
	budget := 4*len(data) + 1<<20
	off := spoolHeaderSize
	for off < len(data) {
		if r, n, ok := decodeFrame(data[off:]); ok {
			p.recs = append(p.recs, r)
			p.frames = append(p.frames, data[off:off+n:off+n])
			off += n
			continue
		}
		start := off
		for off++; off < len(data); off++ {
			if !plausibleFrame(data[off:]) {
				continue
			}
			budget -= int(binary.LittleEndian.Uint32(data[off:]))
			if budget < 0 {
				off = len(data)
				break
			}
			if _, _, ok := decodeFrame(data[off:]); ok {
				break
			}
		}
		p.bad = append(p.bad, badRange{start, off})
	}
	return p, nil
}

// plausibleFrame is a cheap test run before decodeFrame while resyncing:
// the length fits, and the payload starts with the tag of field 1
// (message), as every payload Append writes does.
func plausibleFrame(b []byte) bool {
	if len(b) <= frameHeaderSize {
		return false
	}
	size := binary.LittleEndian.Uint32(b[0:4])
	return size > 0 && size <= MaxSpoolRecordBytes && uint64(size) <= uint64(len(b)-frameHeaderSize) &&
		b[frameHeaderSize] == 0x0a
}

// corruptError describes p's bad bytes, wrapping ErrSpoolCorrupt.
func (p *parsedSpool) corruptError(path string) error {
	if len(p.bad) == 0 {
		return nil
	}
	skipped := 0
	for _, b := range p.bad {
		skipped += b.end - b.off
	}
	return fmt.Errorf("%w: %s: torn or corrupt record at byte offset %d (%d bytes in %d run(s) unreadable; %d intact records kept)",
		ErrSpoolCorrupt, path, p.bad[0].off, skipped, len(p.bad), len(p.recs))
}

// ReadSpool returns the intact records of the spool at path, in order.
//
// When the spool holds a torn or corrupt record it returns every intact
// record (the ones before the bad bytes, and any after them) together with
// an error wrapping ErrSpoolCorrupt that names the byte offset of the first
// bad record. It never changes the file. A file that is empty, or shorter
// than a header and a prefix of one (a crash while the spool was created),
// holds no record and is not an error.
func ReadSpool(path string) ([]SpoolRecord, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("producer: read spool: %w", err)
	}
	p, err := parseSpool(data)
	if err != nil {
		return nil, fmt.Errorf("producer: spool %s: %w", path, err)
	}
	return p.recs, p.corruptError(path)
}

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
