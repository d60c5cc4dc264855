package deadletter

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/rocketry-go/rocketry/brokercode"
	"github.com/rocketry-go/rocketry/producer"
)

// spoolRecordBytes is a record as rocketry.v1's SpoolRecord encoded it
// before the record moved out of gen/, spelt field by field so that it does
// not depend on any generated type: message (1: id, topic, body), error
// (2), attempts (3), code (4, rocketry.v1's number), spooled_at (5:
// seconds, nanos), maybe_stored_at (6).
func spoolRecordBytes(id string, code int32, at time.Time) []byte {
	var m []byte
	m = protowire.AppendTag(m, 1, protowire.BytesType)
	m = protowire.AppendString(m, id)
	m = protowire.AppendTag(m, 2, protowire.BytesType)
	m = protowire.AppendString(m, "orders")
	m = protowire.AppendTag(m, 6, protowire.BytesType)
	m = protowire.AppendBytes(m, []byte("body"))
	var ts []byte
	ts = protowire.AppendTag(ts, 1, protowire.VarintType)
	ts = protowire.AppendVarint(ts, uint64(at.Unix()))
	ts = protowire.AppendTag(ts, 2, protowire.VarintType)
	ts = protowire.AppendVarint(ts, uint64(at.Nanosecond()))

	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, m)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, "throttled")
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, 4)
	if code != 0 {
		b = protowire.AppendTag(b, 4, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(code)))
	}
	b = protowire.AppendTag(b, 5, protowire.BytesType)
	b = protowire.AppendBytes(b, ts)
	b = protowire.AppendTag(b, 6, protowire.BytesType)
	b = protowire.AppendString(b, "127.0.0.1:9876")
	return b
}

// TestStoredCodesStillRead: a record written before the codes were
// brokercode's (and before the record left gen/) reads with the same code
// and fields, in both value formats, for every code; and a record written
// now carries the same numbers in the same fields.
func TestStoredCodesStillRead(t *testing.T) {
	at := time.Date(2026, 11, 1, 12, 0, 0, 5, time.UTC)
	for _, c := range append(brokercode.Codes(), brokercode.Code(418)) {
		t.Run(c.String(), func(t *testing.T) {
			id := "m-" + c.String()
			old := spoolRecordBytes(id, int32(c), at)
			for name, v := range map[string][]byte{"format 1": old, "format 2": seal(key(id), old)} {
				d, err := decode(key(id), v)
				require.NoError(t, err, name)
				assert.Equal(t, c, d.Code, "%s: code", name)
				assert.Equal(t, int32(c), int32(d.Code), "%s: number", name)
				assert.Equal(t, &producer.Message{ID: id, Topic: "orders", Body: []byte("body")}, d.Message, name)
				assert.Equal(t, "throttled", d.Err, name)
				assert.Equal(t, 4, d.Attempts, name)
				assert.True(t, d.DeadLetteredAt.Equal(at), "%s: DeadLetteredAt = %v; want %v", name, d.DeadLetteredAt, at)
				assert.Equal(t, "127.0.0.1:9876", d.MaybeStoredAt, name)
			}

			// Written now: field 4 holds the same number, field 5 the time.
			v, err := encode(&producer.DeadLetter{Message: &producer.Message{ID: id, Topic: "orders"}, Code: c, DeadLetteredAt: at})
			require.NoError(t, err)
			payload, unchecked, err := unseal(key(id), v)
			require.NoError(t, err)
			require.False(t, unchecked)
			fields := map[protowire.Number][]byte{}
			var code uint64
			for len(payload) > 0 {
				num, typ, n := protowire.ConsumeTag(payload)
				require.GreaterOrEqual(t, n, 0)
				payload = payload[n:]
				switch typ {
				case protowire.VarintType:
					x, m := protowire.ConsumeVarint(payload)
					require.GreaterOrEqual(t, m, 0)
					if num == 4 {
						code = x
					}
					payload = payload[m:]
				case protowire.BytesType:
					x, m := protowire.ConsumeBytes(payload)
					require.GreaterOrEqual(t, m, 0)
					fields[num] = x
					payload = payload[m:]
				default:
					t.Fatalf("field %d has wire type %d", num, typ)
				}
			}
			assert.Equal(t, int64(c), int64(code), "field 4 (code)")
			assert.Contains(t, fields, protowire.Number(1), "field 1 (message)")
			assert.Contains(t, fields, protowire.Number(5), "field 5 (the time)")
		})
	}
}

// TestStoreReadsRecordsWrittenBefore: a store file holding records as they
// were written before (format 1, and format 2 with rocketry.v1's numbers)
// opens, and Get and Scan give them back with their codes.
func TestStoreReadsRecordsWrittenBefore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dead.db")
	s, err := Open(path)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	at := time.Date(2026, 10, 1, 8, 0, 0, 0, time.UTC)
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketRecords)
		if err != nil {
			return err
		}
		if err := b.Put(key("old-530"), spoolRecordBytes("old-530", 530, at)); err != nil { // format 1
			return err
		}
		return b.Put(key("old-503"), seal(key("old-503"), spoolRecordBytes("old-503", 503, at))) // format 2
	}))
	require.NoError(t, db.Close())

	s, err = Open(path)
	require.NoError(t, err)
	defer s.Close()
	d, err := s.Get("old-530")
	require.NoError(t, err)
	assert.Equal(t, brokercode.TooManyRequests, d.Code)
	assert.True(t, d.DeadLetteredAt.Equal(at), "DeadLetteredAt = %v; want %v", d.DeadLetteredAt, at)
	d, err = s.Get("old-503")
	require.NoError(t, err)
	assert.Equal(t, brokercode.Unavailable, d.Code)
	codes := map[string]brokercode.Code{}
	require.NoError(t, s.Scan(func(d *producer.DeadLetter, err error) error {
		require.NoError(t, err)
		codes[d.Message.ID] = d.Code
		return nil
	}))
	assert.Equal(t, map[string]brokercode.Code{"old-530": brokercode.TooManyRequests, "old-503": brokercode.Unavailable}, codes)
}
