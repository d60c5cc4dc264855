package deadletter

import (
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/internal/deadletterpb"
)

// oldFrameOf is one record of the old spool format for message id.
func oldFrameOf(t testing.TB, id string, body []byte) []byte {
	t.Helper()
	payload, err := proto.Marshal(&deadletterpb.Record{
		Message: &rocketryv1.Message{MessageId: id, Topic: "orders", Body: body},
		Error:   "unavailable", Attempts: 3, Code: rocketryv1.Code_CODE_UNAVAILABLE,
	})
	require.NoError(t, err)
	f := make([]byte, oldFrameHeaderSize, oldFrameHeaderSize+len(payload))
	binary.LittleEndian.PutUint32(f[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(f[4:8], crc32.Checksum(payload, castagnoli))
	return append(f, payload...)
}

func oldHeader() []byte {
	return binary.LittleEndian.AppendUint32([]byte(oldSpoolMagic), oldSpoolVersion)
}

func writeOld(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "old.spool")
	require.NoError(t, os.WriteFile(p, data, 0o600))
	return p
}

func storeIDs(t *testing.T, s *Store) []string {
	t.Helper()
	var ids []string
	require.NoError(t, s.Scan(func(d *producerDeadLetter, err error) error {
		require.NoError(t, err)
		ids = append(ids, d.Message.ID)
		return nil
	}))
	return ids
}

func TestImportSpool(t *testing.T) {
	data := oldHeader()
	for _, id := range []string{"m-0", "m-1", "m-2", "m-1"} { // m-1 twice: one record
		data = append(data, oldFrameOf(t, id, []byte("body "+id))...)
	}
	old := writeOld(t, data)
	s, err := Open(filepath.Join(t.TempDir(), "dead.db"))
	require.NoError(t, err)
	defer s.Close()
	res, err := s.ImportSpool(old)
	require.NoError(t, err)
	assert.Equal(t, ImportResult{Imported: 4}, res)
	assert.Equal(t, []string{"m-0", "m-1", "m-2"}, storeIDs(t, s))
	d, err := s.Get("m-2")
	require.NoError(t, err)
	assert.Equal(t, "body m-2", string(d.Message.Body))
	assert.Equal(t, 3, d.Attempts)
	after, err := os.ReadFile(old)
	require.NoError(t, err)
	assert.Equal(t, data, after, "the old file is left as it was")
}

// TestImportStopsAtTornRecord is the regression test of issue 13's fourth
// item: after a torn record the old reader scanned forward byte by byte and
// accepted a frame found inside the torn record's body, so that a replay
// stored a message nobody sent. The import stops at the torn record: what
// lies after it is not trusted.
func TestImportStopsAtTornRecord(t *testing.T) {
	inner := oldFrameOf(t, "ghost", []byte("never sent on its own"))
	torn := oldFrameOf(t, "m-1", append(append([]byte("prefix "), inner...), " suffix"...))
	cut := len(torn) - len(" suffix") // the write tore after the embedded frame
	data := append(append(oldHeader(), oldFrameOf(t, "m-0", []byte("ok"))...), torn[:cut]...)
	old := writeOld(t, data)

	s, err := Open(filepath.Join(t.TempDir(), "dead.db"))
	require.NoError(t, err)
	defer s.Close()
	res, err := s.ImportSpool(old)
	require.ErrorIs(t, err, ErrCorrupt)
	off := len(oldHeader()) + len(oldFrameOf(t, "m-0", []byte("ok")))
	assert.Contains(t, err.Error(), "byte offset "+itoa(off))
	assert.Equal(t, ImportResult{Imported: 1, Unread: int64(len(data) - off)}, res)
	assert.Equal(t, []string{"m-0"}, storeIDs(t, s), "the frame inside the torn record must not be imported")
}

func TestImportRefusesForeignFile(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "dead.db"))
	require.NoError(t, err)
	defer s.Close()
	for name, data := range map[string][]byte{
		"bad magic":   []byte("NOTASPOOL and more bytes"),
		"bad version": binary.LittleEndian.AppendUint32([]byte(oldSpoolMagic), 9),
	} {
		_, err := s.ImportSpool(writeOld(t, data))
		assert.ErrorIs(t, err, ErrCorrupt, name)
	}
	_, err = s.ImportSpool(filepath.Join(t.TempDir(), "missing"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	// Empty, or cut inside its header: no record, no error.
	for _, data := range [][]byte{nil, []byte("RKTS"), oldHeader()[:10]} {
		res, err := s.ImportSpool(writeOld(t, data))
		assert.NoError(t, err)
		assert.Zero(t, res.Imported)
	}
}
