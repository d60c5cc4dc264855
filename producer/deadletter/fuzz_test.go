package deadletter

import (
	"bytes"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/rocketry-go/rocketry/producer"
)

type producerDeadLetter = producer.DeadLetter

func itoa(n int) string { return strconv.Itoa(n) }

// FuzzDecodeRecord feeds any bytes as a stored record's key and value, as a
// damaged or foreign store holds them: decode never panics, a record it
// accepts encodes back to one it reads the same, and what it accepts in a
// store of format 2 it accepts in a legacy one (see unseal).
func FuzzDecodeRecord(f *testing.F) {
	for _, d := range []*producer.DeadLetter{
		{Message: &producer.Message{ID: "m-1", Topic: "t", Body: []byte("b")}, Err: "e", Attempts: 2, MaybeStoredAt: "a:1"},
		{Message: &producer.Message{ID: "m-2", Topic: "t", Keys: []string{"k"}, Properties: map[string]string{"p": "v"}, Transactional: true}},
	} {
		v, err := encode(d, 0)
		if err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(d.Message.ID), v)
		f.Add([]byte("other"), v)
		f.Add([]byte(d.Message.ID), v[:len(v)/2])
	}
	f.Add([]byte("k"), []byte{})
	f.Add([]byte("k"), []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, k, v []byte) {
		d, err := decode(k, v, true)
		if err != nil {
			if _, serr := decode(k, v, false); serr == nil {
				t.Fatalf("decode(%q, ...) accepts in a store of format 2 what it refuses in a legacy one (%v)", k, err)
			}
			return
		}
		if _, serr := decode(k, v, false); (serr == nil) != isSealed(v) {
			t.Fatalf("decode(%q, ...) in a store of format 2: %v, for a value sealed %v", k, serr, isSealed(v))
		}
		if d.Message == nil || d.Message.ID == "" || !bytes.Equal(key(d.Message.ID), k) {
			t.Fatalf("decode(%q, ...) accepted %+v", k, d)
		}
		v2, err := encode(d, 0)
		if err != nil {
			return // over a limit, or a string proto refuses: Put says so
		}
		d2, err := decode(k, v2, false)
		if err != nil {
			t.Fatalf("decode(encode(decode(v))) = %v", err)
		}
		if !proto.Equal(toProto(d), toProto(d2)) {
			t.Fatalf("round trip changed the record: %+v != %+v", d, d2)
		}
	})
}

// FuzzParseOldSpool feeds any bytes as an old spool file: the reader never
// panics, reads records only from the start up to the first bad one, and
// every record it returns has an ID.
func FuzzParseOldSpool(f *testing.F) {
	f.Add([]byte{})
	f.Add(oldHeader())
	f.Add(append(oldHeader(), oldFrameOf(f, "m-0", []byte("x"))...))
	torn := oldFrameOf(f, "m-1", append([]byte("p"), oldFrameOf(f, "g", nil)...))
	f.Add(append(oldHeader(), torn[:len(torn)-1]...))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, off, err := parseOldSpool(data)
		if off < 0 || off > len(data) || (err == nil && off != len(data) && len(recs) > 0) {
			t.Fatalf("parseOldSpool: off %d of %d, err %v", off, len(data), err)
		}
		for _, d := range recs {
			if d.Message.ID == "" {
				t.Fatalf("record without an ID")
			}
		}
	})
}
