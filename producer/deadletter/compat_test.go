package deadletter

import (
	"bytes"
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
				d, err := decode(key(id), v, name == "format 1") // format 1 is read from a legacy store
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
			v, err := encode(&producer.DeadLetter{Message: &producer.Message{ID: id, Topic: "orders"}, Code: c, DeadLetteredAt: at}, 0)
			require.NoError(t, err)
			payload, unchecked, err := unseal(key(id), v, false)
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

// TestStoreReadsRecordsWrittenBefore: a store file holding only records
// as they were written before checksums (format 1) opens read-only and for
// writing, and Get and Scan give them back with their codes; Open for
// writing seals them in place, so that the file holds format 2 only. In a
// store that holds a record of format 2, one of format 1 is damage, never
// sent: a few damaged bytes of a record's marker make it look like one.
func TestStoreReadsRecordsWrittenBefore(t *testing.T) {
	at := time.Date(2026, 10, 1, 8, 0, 0, 0, time.UTC)
	// write makes a store at path holding vals, as the engine stores them.
	write := func(t *testing.T, vals map[string][]byte) string {
		path := filepath.Join(t.TempDir(), "dead.db")
		db, err := bolt.Open(path, 0o600, nil)
		require.NoError(t, err)
		require.NoError(t, db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists(bucketRecords)
			if err != nil {
				return err
			}
			for k, v := range vals {
				if err := b.Put([]byte(k), v); err != nil {
					return err
				}
			}
			return nil
		}))
		require.NoError(t, db.Close())
		return path
	}
	// raw reads the stored values of the store at path.
	raw := func(t *testing.T, path string) map[string][]byte {
		db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
		require.NoError(t, err)
		defer db.Close()
		vals := map[string][]byte{}
		require.NoError(t, db.View(func(tx *bolt.Tx) error {
			return tx.Bucket(bucketRecords).ForEach(func(k, v []byte) error {
				vals[string(k)] = bytes.Clone(v)
				return nil
			})
		}))
		return vals
	}
	old := map[string][]byte{
		"old-530": spoolRecordBytes("old-530", 530, at),
		"old-503": spoolRecordBytes("old-503", 503, at),
	}
	want := map[string]brokercode.Code{"old-530": brokercode.TooManyRequests, "old-503": brokercode.Unavailable}
	codes := func(t *testing.T, s *Store) map[string]brokercode.Code {
		got := map[string]brokercode.Code{}
		require.NoError(t, s.Scan(func(d *producer.DeadLetter, err error) error {
			require.NoError(t, err)
			got[d.Message.ID] = d.Code
			return nil
		}))
		d, err := s.Get("old-530")
		require.NoError(t, err)
		assert.True(t, d.DeadLetteredAt.Equal(at), "DeadLetteredAt = %v; want %v", d.DeadLetteredAt, at)
		return got
	}

	t.Run("format 1 only", func(t *testing.T) {
		path := write(t, old)
		rep, err := Check(path)
		require.NoError(t, err)
		assert.Equal(t, 2, rep.Records)
		assert.Equal(t, 2, rep.Unchecked)
		assert.True(t, rep.Intact(), "%+v", rep)

		ro, err := Open(path, WithReadOnly())
		require.NoError(t, err)
		assert.Equal(t, want, codes(t, ro))
		require.NoError(t, ro.Close())
		assert.Equal(t, old, raw(t, path), "a read-only Open changed the file")

		s, err := Open(path)
		require.NoError(t, err)
		assert.Equal(t, want, codes(t, s))
		require.NoError(t, s.Close())
		for k, v := range raw(t, path) {
			assert.Equal(t, seal([]byte(k), old[k]), v, "%s: not sealed in place", k)
		}
		rep, err = Check(path)
		require.NoError(t, err)
		assert.Equal(t, 2, rep.Records)
		assert.Zero(t, rep.Unchecked)
	})

	t.Run("beside format 2", func(t *testing.T) {
		path := write(t, map[string][]byte{
			"old-530": old["old-530"],
			"old-503": seal([]byte("old-503"), old["old-503"]),
		})
		rep, err := Check(path)
		require.NoError(t, err)
		assert.Equal(t, 1, rep.Records)
		require.Len(t, rep.Damaged, 1)
		assert.Equal(t, "old-530", rep.Damaged[0].Key)

		s, err := Open(path)
		require.NoError(t, err)
		_, err = s.Get("old-530")
		require.ErrorIs(t, err, ErrCorrupt)
		d, err := s.Get("old-503")
		require.NoError(t, err)
		assert.Equal(t, brokercode.Unavailable, d.Code)
		require.NoError(t, s.Close())
		assert.Equal(t, old["old-530"], raw(t, path)["old-530"], "a damaged record was changed")
	})
}
