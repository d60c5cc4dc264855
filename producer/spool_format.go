package producer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"strings"
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
