package deadletter

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"

	"github.com/rocketry-go/rocketry/producer"
)

// The old spool format (producer.WithSpool before this store), version 1,
// integers little-endian:
//
//	file:    "RKTSPOOL" | version uint32 (= 1) | record*
//	record:  length uint32 | CRC-32C of payload uint32 | payload
//	payload: proto.Marshal(deadletterpb.Record), rocketry.v1's SpoolRecord then
//
// It is only read, to import it.
const (
	oldSpoolVersion    = 1
	oldSpoolHeaderSize = len(oldSpoolMagic) + 4
	oldFrameHeaderSize = 8
	oldMaxPayload      = 64 << 20 // the old format's limit: a larger length is corruption
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ImportResult counts what ImportSpool did.
type ImportResult struct {
	// Imported is how many records were put into the store.
	Imported int
	// Unread is how many bytes at the end of the file were not imported:
	// from the first torn or corrupt record on. 0 when the whole file was
	// read.
	Unread int64
}

// ImportSpool puts every record of the old spool file at path into the
// store, and leaves the file as it is (remove it once the import is done).
// Records are read in order, each checked (length, CRC-32C, decoding, an
// ID) before it is put. At the first record that is torn or corrupt the
// import stops, and the error, wrapping ErrCorrupt, names the byte offset:
// nothing after a bad record is trusted, since a frame found inside a torn
// record's body is not a record anybody wrote. Importing the same file
// twice keeps one record per message ID.
func (s *Store) ImportSpool(path string) (ImportResult, error) {
	var res ImportResult
	data, err := os.ReadFile(path)
	if err != nil {
		return res, fmt.Errorf("deadletter: import spool: %w", err)
	}
	recs, off, err := parseOldSpool(data)
	for _, d := range recs {
		if perr := s.Put(d); perr != nil {
			return res, fmt.Errorf("deadletter: import spool %s: message %q: %w", path, d.Message.ID, perr)
		}
		res.Imported++
	}
	if err != nil {
		res.Unread = int64(len(data) - off)
		return res, fmt.Errorf("deadletter: import spool %s: %w (%d records imported, %d bytes from there on not read)", path, err, res.Imported, res.Unread)
	}
	return res, nil
}

// parseOldSpool reads the records of an old spool up to the first bad one;
// off is where reading stopped (len(data) when the whole file was read).
// An empty file, or one cut inside its header, holds no record.
func parseOldSpool(data []byte) (recs []*producer.DeadLetter, off int, err error) {
	if len(data) < oldSpoolHeaderSize {
		if len(data) <= len(oldSpoolMagic) && string(data) == oldSpoolMagic[:len(data)] {
			return nil, len(data), nil
		}
		if len(data) > len(oldSpoolMagic) && string(data[:len(oldSpoolMagic)]) == oldSpoolMagic {
			return nil, len(data), nil // torn header: created, never written
		}
		return nil, 0, fmt.Errorf("%w at byte offset 0: not an old rocketry spool (no header)", ErrCorrupt)
	}
	if string(data[:len(oldSpoolMagic)]) != oldSpoolMagic {
		return nil, 0, fmt.Errorf("%w at byte offset 0: not an old rocketry spool (bad magic)", ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint32(data[len(oldSpoolMagic):]); v != oldSpoolVersion {
		return nil, 0, fmt.Errorf("%w at byte offset %d: old spool version %d is not supported (this code reads version %d)", ErrCorrupt, len(oldSpoolMagic), v, oldSpoolVersion)
	}
	off = oldSpoolHeaderSize
	for off < len(data) {
		d, n, why := oldFrame(data[off:])
		if why != "" {
			return recs, off, fmt.Errorf("%w at byte offset %d: %s", ErrCorrupt, off, why)
		}
		recs = append(recs, d)
		off += n
	}
	return recs, off, nil
}

// oldFrame reads the record at the start of b and its size, or says why it
// is not one.
func oldFrame(b []byte) (*producer.DeadLetter, int, string) {
	if len(b) < oldFrameHeaderSize {
		return nil, 0, "torn record header"
	}
	size := binary.LittleEndian.Uint32(b[0:4])
	switch {
	case size == 0 || size > oldMaxPayload:
		return nil, 0, fmt.Sprintf("record length %d out of range", size)
	case uint64(size) > uint64(len(b)-oldFrameHeaderSize):
		return nil, 0, fmt.Sprintf("torn record: %d bytes of %d", len(b)-oldFrameHeaderSize, size)
	}
	payload := b[oldFrameHeaderSize : oldFrameHeaderSize+int(size)]
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(b[4:8]) {
		return nil, 0, "record checksum mismatch"
	}
	d, err := decodeOld(payload)
	if err != nil {
		return nil, 0, err.Error()
	}
	return d, oldFrameHeaderSize + int(size), ""
}
