package producer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

func testRecord(i int) SpoolRecord {
	return SpoolRecord{
		Message: &Message{
			ID:         fmt.Sprintf("id-%d", i),
			Topic:      "orders",
			Tag:        "tag",
			Keys:       []string{"k1", fmt.Sprint(i)},
			Properties: map[string]string{"p": "v"},
			Body:       []byte(fmt.Sprintf("body %d", i)),
		},
		Err:       "producer: attempts exhausted: rpc error: code = Internal",
		Attempts:  3,
		Code:      rocketryv1.Code_CODE_INTERNAL_ERROR,
		SpooledAt: time.Date(2026, 11, 21, 12, 0, i, 123, time.UTC),
	}
}

// writeTestSpool writes n test records to a new spool and returns its path
// and bytes.
func writeTestSpool(t *testing.T, n int) (string, []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dead.spool")
	s, err := OpenSpool(path)
	if err != nil {
		t.Fatalf("OpenSpool(%q) = %v", path, err)
	}
	for i := range n {
		if err := s.Append(testRecord(i)); err != nil {
			t.Fatalf("Append(record %d) = %v", i, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, data
}

// frameEnds returns the byte offset at which each record of a clean spool
// ends.
func frameEnds(t *testing.T, data []byte) []int {
	t.Helper()
	p, err := parseSpool(data)
	if err != nil || len(p.bad) > 0 {
		t.Fatalf("parseSpool(clean spool) = %v, bad %v", err, p.bad)
	}
	ends := make([]int, len(p.frames))
	end := spoolHeaderSize
	for i, f := range p.frames {
		end += len(f)
		ends[i] = end
	}
	return ends
}

func wantRecords(t *testing.T, got []SpoolRecord, ids ...int) {
	t.Helper()
	if len(got) != len(ids) {
		t.Fatalf("got %d records %v; want ids %v", len(got), recordIDs(got), ids)
	}
	for i, id := range ids {
		if want := testRecord(id); !reflect.DeepEqual(got[i], want) {
			t.Fatalf("record %d = %+v (message %+v); want %+v (message %+v)", i, got[i], got[i].Message, want, want.Message)
		}
	}
}

func recordIDs(recs []SpoolRecord) []string {
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.Message.ID
	}
	return ids
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func corruptCopies(t *testing.T, path string) []string {
	t.Helper()
	m, err := filepath.Glob(path + ".corrupt-*")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSpoolRoundTrip(t *testing.T) {
	path, _ := writeTestSpool(t, 3)
	got, err := ReadSpool(path)
	if err != nil {
		t.Fatalf("ReadSpool() = %v; want nil", err)
	}
	wantRecords(t, got, 0, 1, 2)

	// Reopening appends after the existing records.
	s, err := OpenSpool(path)
	if err != nil {
		t.Fatalf("OpenSpool(existing) = %v", err)
	}
	if err := s.Recovered(); err != nil {
		t.Errorf("Recovered() = %v; want nil for an intact spool", err)
	}
	if err := s.Append(testRecord(3)); err != nil {
		t.Fatalf("Append() = %v", err)
	}
	before := time.Now()
	if err := s.Append(SpoolRecord{Message: &Message{ID: "no-time", Topic: "t"}}); err != nil {
		t.Fatalf("Append(zero SpooledAt) = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got, err = ReadSpool(path)
	if err != nil || len(got) != 5 {
		t.Fatalf("ReadSpool() = %d records, %v; want 5, nil", len(got), err)
	}
	wantRecords(t, got[:4], 0, 1, 2, 3)
	if at := got[4].SpooledAt; at.Before(before.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
		t.Errorf("SpooledAt of a record appended with zero = %v; want about now", at)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("spool mode = %v, %v; want 0600", info.Mode().Perm(), err)
	}
}

func TestSpoolEmptyAndTornHeader(t *testing.T) {
	hdr := spoolHeader()
	for _, n := range []int{0, 1, spoolHeaderSize - 1, spoolHeaderSize} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s")
			writeFile(t, path, hdr[:n])
			if got, err := ReadSpool(path); err != nil || len(got) != 0 {
				t.Fatalf("ReadSpool(header[:%d]) = %d records, %v; want 0, nil", n, len(got), err)
			}
			s, err := OpenSpool(path)
			if err != nil {
				t.Fatalf("OpenSpool(header[:%d]) = %v", n, err)
			}
			if err := s.Append(testRecord(7)); err != nil {
				t.Fatal(err)
			}
			s.Close()
			got, err := ReadSpool(path)
			if err != nil {
				t.Fatalf("ReadSpool() = %v", err)
			}
			wantRecords(t, got, 7)
		})
	}
}

func TestSpoolConcurrentAppend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	s, err := OpenSpool(path)
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 20
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if err := s.Append(testRecord(w*each + i)); err != nil {
					t.Errorf("Append() = %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSpool(path)
	if err != nil {
		t.Fatalf("ReadSpool() = %v", err)
	}
	seen := map[string]int{}
	for _, r := range got {
		seen[r.Message.ID]++
	}
	if len(got) != writers*each || len(seen) != writers*each {
		t.Fatalf("ReadSpool() = %d records, %d distinct; want %d of each", len(got), len(seen), writers*each)
	}
}

// TestSpoolAppendRacingClose closes a spool while appends run: every
// append that returned nil is in the file, every other one failed with
// os.ErrClosed.
func TestSpoolAppendRacingClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	s, err := OpenSpool(path)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ok := map[string]bool{}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 50 {
				r := testRecord(w*50 + i)
				err := s.Append(r)
				if err != nil && !errors.Is(err, os.ErrClosed) {
					t.Errorf("Append() = %v; want nil or os.ErrClosed", err)
				}
				if err == nil {
					mu.Lock()
					ok[r.Message.ID] = true
					mu.Unlock()
				}
			}
		})
	}
	wg.Go(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	wg.Wait()
	got, err := ReadSpool(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range got {
		delete(ok, r.Message.ID)
	}
	if len(ok) != 0 {
		t.Errorf("appends that returned nil but are not in the spool: %v", ok)
	}
}

func TestSpoolAppendErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	s, err := OpenSpool(path)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		rec  SpoolRecord
		want string
	}{
		{"nil message", SpoolRecord{}, "no message"},
		{"no id", SpoolRecord{Message: &Message{Topic: "t"}}, "no ID"},
		{"too large", SpoolRecord{Message: &Message{ID: "x", Body: make([]byte, MaxSpoolRecordBytes)}}, "over the limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.Append(tt.rec); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Append(%s) = %v; want an error containing %q", tt.name, err, tt.want)
			}
		})
	}
	// Invalid UTF-8 in the error text is replaced, not refused.
	if err := s.Append(SpoolRecord{Message: &Message{ID: "u", Topic: "t"}, Err: "bad \xff"}); err != nil {
		t.Errorf("Append(invalid UTF-8 Err) = %v; want nil", err)
	}
	if _, err := OpenSpool(path); err == nil {
		t.Errorf("OpenSpool(a spool already open) = nil; want an error")
	}
	if _, err := ReplaySpool(context.Background(), path, func(context.Context, *Message) error { return nil }); err == nil {
		t.Errorf("ReplaySpool(a spool open for appending) = nil; want an error")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close() = %v; want nil", err)
	}
	if err := s.Append(testRecord(1)); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Append after Close = %v; want os.ErrClosed", err)
	}
	got, err := ReadSpool(path)
	if err != nil || len(got) != 1 || got[0].Err != "bad \uFFFD" {
		t.Errorf("ReadSpool() = %v, %v; want the one record with Err %q", got, err, "bad \uFFFD")
	}
}

// TestSpoolTornTail cuts a 3-record spool at every byte, as a crash during
// an append may leave it: the intact records are always read and the cut is
// reported at the offset of the torn record; OpenSpool repairs the file
// without losing a byte (checked at a sample of the cuts).
func TestSpoolTornTail(t *testing.T) {
	_, data := writeTestSpool(t, 3)
	ends := frameEnds(t, data)
	dir := t.TempDir()
	for cut := 0; cut <= len(data); cut++ {
		intact, tornAt := 0, -1
		for _, e := range ends {
			if e <= cut {
				intact++
			}
		}
		if cut > spoolHeaderSize && (intact == 0 || ends[intact-1] != cut) {
			tornAt = spoolHeaderSize
			if intact > 0 {
				tornAt = ends[intact-1]
			}
		}
		ids := make([]int, intact)
		for i := range ids {
			ids[i] = i
		}

		path := filepath.Join(dir, fmt.Sprintf("cut%d.spool", cut))
		writeFile(t, path, data[:cut])
		got, err := ReadSpool(path)
		if tornAt < 0 && err != nil {
			t.Fatalf("cut %d: ReadSpool() = %v; want nil at a record boundary", cut, err)
		}
		if tornAt >= 0 && (!errors.Is(err, ErrSpoolCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("offset %d ", tornAt))) {
			t.Fatalf("cut %d: ReadSpool() = %v; want ErrSpoolCorrupt at offset %d", cut, err, tornAt)
		}
		wantRecords(t, got, ids...)

		// Repairing costs several fsyncs: check it at every boundary and
		// the bytes around it, and at every 7th cut elsewhere.
		near := cut%7 == 0 || cut <= spoolHeaderSize+1
		for _, e := range ends {
			near = near || (cut >= e-1 && cut <= e+1)
		}
		if !near {
			continue
		}
		s, err := OpenSpool(path)
		if err != nil {
			t.Fatalf("cut %d: OpenSpool() = %v", cut, err)
		}
		if rec := s.Recovered(); (rec != nil) != (tornAt >= 0) || (rec != nil && !errors.Is(rec, ErrSpoolCorrupt)) {
			t.Fatalf("cut %d: Recovered() = %v; want ErrSpoolCorrupt: %v", cut, rec, tornAt >= 0)
		}
		if err := s.Append(testRecord(9)); err != nil {
			t.Fatalf("cut %d: Append() = %v", cut, err)
		}
		s.Close()
		got, err = ReadSpool(path)
		if err != nil {
			t.Fatalf("cut %d: ReadSpool() after repair and append = %v; want nil", cut, err)
		}
		wantRecords(t, got, append(ids, 9)...)
		copies := corruptCopies(t, path)
		if tornAt < 0 && len(copies) != 0 {
			t.Fatalf("cut %d: corrupt copies %v; want none", cut, copies)
		}
		if tornAt >= 0 {
			if len(copies) != 1 {
				t.Fatalf("cut %d: corrupt copies %v; want one", cut, copies)
			}
			if saved, _ := os.ReadFile(copies[0]); !bytes.Equal(saved, data[:cut]) {
				t.Fatalf("cut %d: the saved copy differs from the original bytes", cut)
			}
		}
	}
}

// TestSpoolFlippedByte damages each byte of a 3-record spool in turn: the
// damage is always reported, and only the damaged record is lost.
func TestSpoolFlippedByte(t *testing.T) {
	_, data := writeTestSpool(t, 3)
	ends := frameEnds(t, data)
	path := filepath.Join(t.TempDir(), "s")
	for pos := range data {
		bad := bytes.Clone(data)
		bad[pos] ^= 0xff
		writeFile(t, path, bad)
		got, err := ReadSpool(path)
		if pos < spoolHeaderSize {
			if err == nil || len(got) != 0 {
				t.Fatalf("flip at %d (header): ReadSpool() = %d records, %v; want none and an error", pos, len(got), err)
			}
			continue
		}
		damaged := 0
		for pos >= ends[damaged] {
			damaged++
		}
		var ids []int
		for i := range ends {
			if i != damaged {
				ids = append(ids, i)
			}
		}
		start := spoolHeaderSize
		if damaged > 0 {
			start = ends[damaged-1]
		}
		if !errors.Is(err, ErrSpoolCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("offset %d ", start)) {
			t.Fatalf("flip at %d: ReadSpool() = %v; want ErrSpoolCorrupt at offset %d", pos, err, start)
		}
		wantRecords(t, got, ids...)
	}
}

func TestOpenSpoolRefusesForeignFile(t *testing.T) {
	_, spool := writeTestSpool(t, 1)
	future := bytes.Clone(spool)
	future[len(spoolMagic)] = 2 // version 2
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"text", []byte("hello, this is not a spool\n"), "not a rocketry spool"},
		{"short", []byte("RKX"), "not a rocketry spool"},
		{"future version", future, "version 2 is not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			writeFile(t, path, tt.data)
			if s, err := OpenSpool(path); err == nil || !strings.Contains(err.Error(), tt.want) {
				if s != nil {
					s.Close()
				}
				t.Fatalf("OpenSpool(%s) = %v; want an error containing %q", tt.name, err, tt.want)
			}
			send := func(context.Context, *Message) error { t.Error("send called"); return nil }
			if _, err := ReplaySpool(context.Background(), path, send); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ReplaySpool(%s) = %v; want an error containing %q", tt.name, err, tt.want)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, tt.data) {
				t.Fatalf("the file changed: %q; want it untouched", after)
			}
			if c := corruptCopies(t, path); len(c) != 0 {
				t.Fatalf("corrupt copies %v; want none", c)
			}
		})
	}
	if _, err := OpenSpool(filepath.Join(t.TempDir(), "no", "such", "dir")); err == nil {
		t.Errorf("OpenSpool(missing dir) = nil; want an error")
	}
}

// fakeStore is a send func that stores by ID, as the broker does, and fails
// the IDs in fail.
type fakeStore struct {
	mu     sync.Mutex
	stored map[string]int // id -> times sent successfully
	fail   map[string]bool
}

func (f *fakeStore) send(_ context.Context, m *Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail[m.ID] {
		return errors.New("unavailable")
	}
	f.stored[m.ID]++
	return nil
}

func TestReplaySpool(t *testing.T) {
	path, _ := writeTestSpool(t, 5)
	store := &fakeStore{stored: map[string]int{}, fail: map[string]bool{"id-1": true, "id-3": true}}
	ctx := context.Background()

	res, err := ReplaySpool(ctx, path, store.send)
	if want := (ReplayResult{Read: 5, Stored: 3, Failed: 2}); err != nil || res != want {
		t.Fatalf("ReplaySpool() = %+v, %v; want %+v, nil", res, err, want)
	}
	got, err := ReadSpool(path)
	if err != nil {
		t.Fatal(err)
	}
	wantRecords(t, got, 1, 3) // the failed ones, unchanged

	store.fail = nil
	res, err = ReplaySpool(ctx, path, store.send)
	if want := (ReplayResult{Read: 2, Stored: 2}); err != nil || res != want {
		t.Fatalf("second ReplaySpool() = %+v, %v; want %+v, nil", res, err, want)
	}
	res, err = ReplaySpool(ctx, path, store.send)
	if want := (ReplayResult{}); err != nil || res != want {
		t.Fatalf("third ReplaySpool() = %+v, %v; want %+v, nil", res, err, want)
	}
	for i := range 5 {
		if n := store.stored[fmt.Sprintf("id-%d", i)]; n != 1 {
			t.Errorf("id-%d sent successfully %d times; want 1", i, n)
		}
	}
	// The emptied spool is still a spool that appends work on.
	s, err := OpenSpool(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(testRecord(8)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if got, err := ReadSpool(path); err != nil {
		t.Fatal(err)
	} else {
		wantRecords(t, got, 8)
	}
	if m, _ := filepath.Glob(path + ".tmp-*"); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
}

func TestReplaySpoolCorrupt(t *testing.T) {
	path, data := writeTestSpool(t, 3)
	ends := frameEnds(t, data)
	// Damage record 1 in the middle and tear the tail of record 2.
	bad := bytes.Clone(data[:len(data)-3])
	bad[ends[0]+10] ^= 0x01
	writeFile(t, path, bad)
	store := &fakeStore{stored: map[string]int{}}
	res, err := ReplaySpool(context.Background(), path, store.send)
	if want := (ReplayResult{Read: 1, Stored: 1, Corrupt: true}); res != want || !errors.Is(err, ErrSpoolCorrupt) ||
		!strings.Contains(err.Error(), fmt.Sprintf("offset %d ", ends[0])) {
		t.Fatalf("ReplaySpool() = %+v, %v; want %+v and ErrSpoolCorrupt at offset %d", res, err, want, ends[0])
	}
	if store.stored["id-0"] != 1 {
		t.Errorf("stored %v; want id-0 once", store.stored)
	}
	if got, err := ReadSpool(path); err != nil || len(got) != 0 {
		t.Errorf("ReadSpool() after replay = %d records, %v; want an empty clean spool", len(got), err)
	}
	copies := corruptCopies(t, path)
	if len(copies) != 1 {
		t.Fatalf("corrupt copies = %v; want one", copies)
	}
	if saved, _ := os.ReadFile(copies[0]); !bytes.Equal(saved, bad) {
		t.Errorf("the saved copy differs from the corrupt spool")
	}
}

func TestReplaySpoolContextEnds(t *testing.T) {
	path, _ := writeTestSpool(t, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sent := 0
	send := func(context.Context, *Message) error {
		sent++
		if sent == 2 {
			cancel()
		}
		return nil
	}
	res, err := ReplaySpool(ctx, path, send)
	if want := (ReplayResult{Read: 4, Stored: 2, Failed: 2}); res != want || !errors.Is(err, context.Canceled) {
		t.Fatalf("ReplaySpool() = %+v, %v; want %+v, context.Canceled", res, err, want)
	}
	got, err := ReadSpool(path)
	if err != nil {
		t.Fatal(err)
	}
	wantRecords(t, got, 2, 3)
	if _, err := ReplaySpool(ctx, path, nil); err == nil {
		t.Errorf("ReplaySpool(nil send) = nil; want an error")
	}
	if _, err := ReplaySpool(ctx, filepath.Join(t.TempDir(), "missing"), send); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReplaySpool(missing file) = %v; want os.ErrNotExist", err)
	}
}

// TestReplaySpoolCrashBeforeRewrite replays a spool, puts the old file back
// (as a crash between the sends and the rename would leave it) and replays
// again: every message is resent with its ID, so a store that deduplicates
// by ID holds each once.
func TestReplaySpoolCrashBeforeRewrite(t *testing.T) {
	path, data := writeTestSpool(t, 3)
	var ids []string
	send := func(_ context.Context, m *Message) error { ids = append(ids, m.ID); return nil }
	for range 2 {
		if res, err := ReplaySpool(context.Background(), path, send); err != nil || res.Stored != 3 {
			t.Fatalf("ReplaySpool() = %+v, %v; want 3 stored", res, err)
		}
		writeFile(t, path, data)
	}
	if want := []string{"id-0", "id-1", "id-2", "id-0", "id-1", "id-2"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("sent IDs %v; want %v", ids, want)
	}
}

// TestReplaySpoolBroker replays a spool to the test broker, first while it
// fails half the sends, then healthy, then once more from the original file
// (as a crash before the rewrite would leave it): the broker stores each
// message exactly once.
func TestReplaySpoolBroker(t *testing.T) {
	const n = 20
	path, data := writeTestSpool(t, n)
	b := brokertest.Start(t, broker.WithSeed(1), broker.WithFaults(broker.Faults{InternalRate: 0.5}))
	cc, err := grpc.NewClient(b.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	client := rocketryv1.NewMessagingServiceClient(cc)
	duplicates := 0
	send := func(ctx context.Context, m *Message) error {
		resp, err := client.SendMessage(ctx, &rocketryv1.SendMessageRequest{Messages: []*rocketryv1.Message{m.toProto()}})
		if err == nil && resp.GetResults()[0].GetDuplicate() {
			duplicates++
		}
		return err
	}
	ctx := context.Background()

	res, err := ReplaySpool(ctx, path, send)
	if err != nil || res.Read != n || res.Stored+res.Failed != n || res.Stored == 0 || res.Failed == 0 {
		t.Fatalf("ReplaySpool(half failing) = %+v, %v; want %d read, some stored, some failed", res, err, n)
	}
	failed := res.Failed
	b.SetFaults(broker.Faults{})
	if res, err := ReplaySpool(ctx, path, send); err != nil || res != (ReplayResult{Read: failed, Stored: failed}) {
		t.Fatalf("ReplaySpool(healthy) = %+v, %v; want all %d stored", res, err, failed)
	}
	writeFile(t, path, data)
	if res, err := ReplaySpool(ctx, path, send); err != nil || res != (ReplayResult{Read: n, Stored: n}) {
		t.Fatalf("ReplaySpool(original again) = %+v, %v; want all %d stored", res, err, n)
	}
	if duplicates != n {
		t.Errorf("broker answered duplicate %d times; want %d", duplicates, n)
	}
	seen := map[string]int{}
	for _, m := range b.Messages("orders") {
		seen[m.GetMessage().GetMessageId()]++
	}
	for i := range n {
		if c := seen[fmt.Sprintf("id-%d", i)]; c != 1 {
			t.Errorf("broker holds id-%d %d times; want 1", i, c)
		}
	}
	if len(seen) != n {
		t.Errorf("broker holds %d distinct ids; want %d", len(seen), n)
	}
}

// FuzzReadSpool feeds arbitrary bytes to the spool reader: it must never
// panic, every record it returns must be intact (re-encoding them gives a
// clean spool that reads back the same), and the bad bytes it reports must
// lie between the records. The seed corpus in testdata/fuzz/FuzzReadSpool
// holds valid, torn and damaged spools.
func FuzzReadSpool(f *testing.F) {
	f.Add(spoolHeader())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := parseSpool(data)
		if err != nil {
			var he *headerError
			if !errors.As(err, &he) || len(p.recs) != 0 {
				t.Fatalf("parseSpool() = %d records, %v; want a header error and no record", len(p.recs), err)
			}
			return
		}
		if len(p.frames) != len(p.recs) {
			t.Fatalf("%d frames for %d records", len(p.frames), len(p.recs))
		}
		// Records and bad runs tile the bytes after the header.
		covered := 0
		for _, fr := range p.frames {
			covered += len(fr)
		}
		last := spoolHeaderSize
		for _, b := range p.bad {
			if b.off < last || b.end <= b.off || b.end > len(data) {
				t.Fatalf("bad runs %v out of order or bounds (len %d)", p.bad, len(data))
			}
			last = b.end
			covered += b.end - b.off
		}
		if len(data) >= spoolHeaderSize && covered != len(data)-spoolHeaderSize {
			t.Fatalf("records and bad runs cover %d bytes; want %d", covered, len(data)-spoolHeaderSize)
		}
		if (p.corruptError("f") == nil) != (len(p.bad) == 0) {
			t.Fatalf("corruptError() disagrees with %d bad runs", len(p.bad))
		}
		clean := spoolHeader()
		for i, r := range p.recs {
			if r.Message == nil || r.Message.ID == "" {
				t.Fatalf("record %d has no message or ID", i)
			}
			fr, err := encodeFrame(&r)
			if err != nil {
				t.Fatalf("encodeFrame(record %d) = %v", i, err)
			}
			clean = append(clean, fr...)
		}
		q, err := parseSpool(clean)
		if err != nil || len(q.bad) != 0 || len(q.recs) != len(p.recs) {
			t.Fatalf("re-encoded spool: %d records, bad %v, %v; want %d, none, nil", len(q.recs), q.bad, err, len(p.recs))
		}
		for i := range q.recs {
			if !reflect.DeepEqual(q.recs[i], p.recs[i]) {
				t.Fatalf("re-encoded record %d = %+v; want %+v", i, q.recs[i], p.recs[i])
			}
		}
	})
}

// BenchmarkSpoolAppend measures one fsync'd append of a small record, from
// one goroutine and from many (-cpu).
func BenchmarkSpoolAppend(b *testing.B) {
	s, err := OpenSpool(filepath.Join(b.TempDir(), "s"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	rec := testRecord(1)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.Append(rec); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// A dead-letter spool keeps the messages whose attempts were spent;
// ReplaySpool resends them and keeps only those that fail again.
func ExampleReplaySpool() {
	dir, err := os.MkdirTemp("", "spool-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "dead.spool")

	s, err := OpenSpool(path)
	if err != nil {
		panic(err)
	}
	for _, id := range []string{"order-1", "order-2", "order-3"} {
		m := &Message{ID: id, Topic: "orders", Body: []byte("...")}
		if err := s.Append(SpoolRecord{Message: m, Err: "broker unavailable", Attempts: 3}); err != nil {
			panic(err)
		}
	}
	if err := s.Close(); err != nil {
		panic(err)
	}

	// A send that fails order-2; with a real broker use a Producer's Send.
	send := func(_ context.Context, m *Message) error {
		if m.ID == "order-2" {
			return errors.New("still unavailable")
		}
		fmt.Println("sent", m.ID)
		return nil
	}
	res, err := ReplaySpool(context.Background(), path, send)
	fmt.Printf("%+v %v\n", res, err)

	left, err := ReadSpool(path)
	fmt.Println("left in the spool:", len(left), left[0].Message.ID, err)
	// Output:
	// sent order-1
	// sent order-3
	// {Read:3 Stored:2 Failed:1 Corrupt:false} <nil>
	// left in the spool: 1 order-2 <nil>
}
