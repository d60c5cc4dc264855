package deadletter_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rocketry-go/rocketry/producer"
	"github.com/rocketry-go/rocketry/producer/deadletter"
)

// The damaged-store tests build one small store (damageKept records, after a
// replay delivered damageDelivered others: its last transaction is that
// replay's last delete, of damageBack records, so that a damaged current
// meta page brings them back), damage copies of it, and open, replay, and
// when Open refuses, check and salvage each copy.
const (
	damageDelivered = 4
	damageKept      = 16
	damageBack      = 1 // Replay deletes each record as soon as it is stored
)

// damageLetter is record i of the damaged-store tests: bodies of varied
// sizes spread the records over a few leaf pages and a branch page.
func damageLetter(i int) *producer.DeadLetter {
	d := letter(fmt.Sprintf("m-%03d", i), "")
	d.Message.Body = []byte(strings.Repeat(fmt.Sprintf("body %d;", i), 25+i%13))
	if i%3 == 0 {
		d.MaybeStoredAt = fmt.Sprintf("10.0.0.%d:7777", i%5)
	}
	return d
}

// sink is a Resender that keeps what it is sent; fail, when set, fails the
// records it returns true for (the error is not a SendError: the record is
// not updated).
type sink struct {
	mu   sync.Mutex
	sent map[string][]*producer.DeadLetter
	fail func(id string) bool
}

func (s *sink) Resend(_ context.Context, d *producer.DeadLetter) (*producer.SendReceipt, error) {
	if s.fail != nil && s.fail(d.Message.ID) {
		return nil, errors.New("refused by the test")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sent == nil {
		s.sent = map[string][]*producer.DeadLetter{}
	}
	s.sent[d.Message.ID] = append(s.sent[d.Message.ID], d)
	return &producer.SendReceipt{MessageID: d.Message.ID}, nil
}

// buildDamageStore makes the store of the damaged-store tests in dir and
// returns its path; want holds the records it keeps, by ID. The records are
// put one by one into a first store, then salvaged into the test's, so
// that its file is small (few free pages).
func buildDamageStore(t testing.TB, dir string) (path string, want map[string]*producer.DeadLetter) {
	t.Helper()
	first := filepath.Join(dir, "first.db")
	s, err := deadletter.Open(first)
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]*producer.DeadLetter{}
	for i := range damageDelivered + damageKept {
		d := damageLetter(i)
		if err := s.Put(d); err != nil {
			t.Fatal(err)
		}
		if i >= damageDelivered {
			want[d.Message.ID] = d
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, "dead.db")
	if _, err := deadletter.Salvage(first, path); err != nil {
		t.Fatal(err)
	}
	if s, err = deadletter.Open(path); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	deliver := &sink{fail: func(id string) bool { return want[id] != nil }}
	res, err := s.Replay(context.Background(), deliver, deadletter.ReplayOptions{})
	if err != nil || res.Stored != damageDelivered {
		t.Fatalf("building the store: Replay = %+v, %v", res, err)
	}
	return path, want
}

// damageOutcome is what became of one damaged copy.
type damageOutcome struct {
	refused   error // Open's error, when it refused the copy
	report    *deadletter.CheckReport
	salvaged  *deadletter.SalvageResult
	replay    deadletter.ReplayResult
	sent      map[string][]*producer.DeadLetter
	replayErr error
}

// fastDir is a new directory in memory (/dev/shm) when there is one, so
// that the thousands of copies of these tests do not wait for a disk's
// fsync; t.TempDir() otherwise.
func fastDir(t testing.TB) string {
	t.Helper()
	if info, err := os.Stat("/dev/shm"); err == nil && info.IsDir() {
		if dir, err := os.MkdirTemp("/dev/shm", "deadletter-test-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

// copyStore copies the store at path (and its delivered ledger) into a new
// directory under parent, with data as the store's content.
func copyStore(t testing.TB, parent, path string, data []byte) string {
	t.Helper()
	dir, err := os.MkdirTemp(parent, "copy-")
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "dead.db")
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if led, err := os.ReadFile(path + ".delivered"); err == nil {
		if err := os.WriteFile(dst+".delivered", led, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// replayCopy replays a copy of the store at path with data as its content
// (replayDamaged), and removes the copy, so that the thousands of copies of
// these tests and of the fuzz target never hold more than one store's room
// at a time, in memory or on disk.
func replayCopy(t testing.TB, parent, path string, data []byte) damageOutcome {
	t.Helper()
	cp := copyStore(t, parent, path, data)
	defer func() {
		if err := os.RemoveAll(filepath.Dir(cp)); err != nil {
			t.Error(err)
		}
	}()
	return replayDamaged(t, cp)
}

// replayDamaged opens the store at path and replays it to a sink, each step
// bounded; when Open refuses the store as damaged, it checks it, salvages
// it into a new store and replays that.
func replayDamaged(t testing.TB, path string) damageOutcome {
	t.Helper()
	var out damageOutcome
	s, err := deadletter.Open(path, deadletter.WithLockTimeout(time.Second))
	if err != nil {
		out.refused = err
		if !errors.Is(err, deadletter.ErrCorrupt) && !errors.Is(err, deadletter.ErrNotStore) {
			t.Fatalf("Open of a damaged store = %v; want ErrCorrupt or ErrNotStore", err)
		}
		if out.report, err = deadletter.Check(path); err != nil {
			t.Fatalf("Check = %v", err)
		}
		salvaged := filepath.Join(filepath.Dir(path), "salvaged.db")
		res, err := deadletter.Salvage(path, salvaged)
		if err != nil {
			t.Fatalf("Salvage = %v", err)
		}
		out.salvaged = &res
		if s, err = deadletter.Open(salvaged); err != nil {
			t.Fatalf("Open of the salvaged store = %v", err)
		}
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sk := &sink{}
	out.replay, out.replayErr = s.Replay(ctx, sk, deadletter.ReplayOptions{})
	if ctx.Err() != nil {
		t.Fatalf("Replay did not end within 10 s: %+v", out.replay)
	}
	out.sent = sk.sent
	return out
}

// checkOutcome asserts the promises on one damaged copy: nothing sent with
// content other than what was put, nothing sent twice, nothing delivered
// sent again, and every kept record either sent, reported damaged, or
// absent with its page reported lost.
func checkOutcome(t testing.TB, what string, want map[string]*producer.DeadLetter, o damageOutcome) {
	t.Helper()
	for id, ds := range o.sent {
		w := want[id]
		switch {
		case w == nil:
			t.Fatalf("%s: sent %q, which is not a kept record (delivered before, or made up)", what, id)
		case len(ds) != 1:
			t.Fatalf("%s: sent %q %d times", what, id, len(ds))
		}
		got := *ds[0]
		got.SendError = nil
		if !reflect.DeepEqual(&got, w) {
			t.Fatalf("%s: sent %q as %+v %+v; it was put as %+v %+v", what, id, got, *got.Message, *w, *w.Message)
		}
	}
	if o.replayErr != nil && !errors.Is(o.replayErr, deadletter.ErrCorrupt) {
		t.Fatalf("%s: Replay = %v", what, o.replayErr)
	}
	damaged := o.replay.Corrupt
	if o.report != nil {
		damaged += len(o.report.Damaged)
	}
	// Left: records a replay stopped by ErrCorrupt (a delete that failed on
	// a damaged page) did not send; they stay in the store.
	accounted := len(o.sent) + damaged + o.replay.Left
	switch {
	case accounted == len(want):
	case accounted > len(want) && accounted-len(want) <= damageBack && damaged >= accounted-len(want):
		// A record the replay delivered last, brought back by a damaged
		// meta page, whose own bytes are damaged too: it does not match its
		// ledger entry, and is reported damaged, not sent.
	case accounted < len(want) && o.report != nil && o.report.LostPages > 0:
		// The rest were on pages the report counts as lost.
	case accounted < len(want) && o.report != nil && o.report.Records == 0 && len(o.report.Problems) > 0:
		// No page of records could be reached at all (no valid meta, no
		// root): the report says why.
	default:
		t.Fatalf("%s: %d sent and %d reported damaged of %d kept records, and no lost page reported (refused: %v, report %+v, replay %+v)",
			what, len(o.sent), damaged, len(want), o.refused, o.report, o.replay)
	}
}

// TestTruncatedStore cuts a copy of the store at every page boundary and
// inside every page: no panic, no hang, nothing changed or sent twice, and
// what is not replayed is reported.
func TestTruncatedStore(t *testing.T) {
	dir := fastDir(t)
	path, want := buildDamageStore(t, dir)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	ps := os.Getpagesize()
	var cuts []int
	for off := 0; off < len(data); off += ps {
		cuts = append(cuts, off, off+1, off+16, off+ps/2, off+ps-1)
	}
	counts := map[string]int{}
	for _, cut := range cuts {
		if cut == 0 {
			continue // an empty file is a new store
		}
		o := replayCopy(t, dir, path, data[:cut])
		checkOutcome(t, fmt.Sprintf("cut at %d of %d", cut, len(data)), want, o)
		counts[outcomeKind(o)]++
	}
	t.Logf("%d cuts of a %d-byte store: %v", len(cuts)-1, len(data), counts)
}

// TestFlippedByteStore flips each byte of a copy of the store in turn: every
// byte a reader may read (page headers, metas, the freelist, elements, keys
// and values, in the pages in use and the free ones), and one byte of the
// unused rest of each page; and single bits of every page header (a count
// made smaller hid 7 records from a replay before Open checked that the
// rest of a page is zero: FuzzOpenDamaged found it). No panic, no hang, no record sent with other
// content or twice, none that a replay had delivered sent again (a damaged
// current meta page brings them back: the delivered ledger keeps them from
// being sent), and every other record either replayed once or reported.
func TestFlippedByteStore(t *testing.T) {
	if testing.Short() {
		t.Skip("opens and replays one copy per byte of the store")
	}
	dir := fastDir(t)
	path, want := buildDamageStore(t, dir)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	offsets, err := deadletter.UsedBytes(path)
	require.NoError(t, err)
	ps := os.Getpagesize()
	for p := 0; p < len(data)/ps; p++ {
		offsets = append(offsets, p*ps+ps-1) // the unused end of each page
	}
	type flip struct {
		at  int
		xor byte
	}
	var flips []flip
	for _, i := range offsets {
		flips = append(flips, flip{i, 0x5a})
	}
	for p := 0; p < len(data)/ps; p++ {
		for i := p * ps; i < p*ps+16; i++ { // page headers: single bits too (a count made smaller)
			for _, x := range []byte{0x01, 0x02, 0x04, 0x07, 0x80, 0xff} {
				flips = append(flips, flip{i, x})
			}
		}
	}
	counts := map[byte]map[string]int{}
	for _, f := range flips {
		i := f.at
		c := append([]byte(nil), data...)
		c[i] ^= f.xor
		cp := copyStore(t, dir, path, c)
		o := replayDamaged(t, cp)
		checkOutcome(t, fmt.Sprintf("byte %d xor %#x", i, f.xor), want, o)
		if counts[f.xor] == nil {
			counts[f.xor] = map[string]int{}
		}
		counts[f.xor][outcomeKind(o)]++
		require.NoError(t, os.RemoveAll(filepath.Dir(cp)))
	}
	t.Logf("%d of the %d bytes of the store flipped (and %d bits of page headers), by xor: %v", len(offsets), len(data), len(flips)-len(offsets), counts)
}

// outcomeKind names what became of a damaged copy, for the tests' logs.
func outcomeKind(o damageOutcome) string {
	switch {
	case o.refused != nil:
		return "refused, checked, salvaged"
	case o.replay.Corrupt > 0:
		return "records reported damaged"
	case o.replay.AlreadyDelivered > 0:
		return "delivered records back, not sent"
	case o.replay.Left > 0:
		return "replay stopped by a failed delete, records left"
	}
	return "no effect"
}

// TestSwappedPages swaps each pair of pages of a copy of the store.
func TestSwappedPages(t *testing.T) {
	dir := fastDir(t)
	path, want := buildDamageStore(t, dir)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	ps := os.Getpagesize()
	n := len(data) / ps
	counts := map[string]int{}
	for a := range n {
		for b := a + 1; b < n; b++ {
			c := append([]byte(nil), data...)
			copy(c[a*ps:(a+1)*ps], data[b*ps:(b+1)*ps])
			copy(c[b*ps:(b+1)*ps], data[a*ps:(a+1)*ps])
			o := replayCopy(t, dir, path, c)
			checkOutcome(t, fmt.Sprintf("pages %d and %d swapped", a, b), want, o)
			counts[outcomeKind(o)]++
		}
	}
	t.Logf("%d pairs of pages swapped: %v", n*(n-1)/2, counts)
}

// TestRollbackDoesNotResendDelivered is the regression test of issue 22's
// third item: with the current meta page damaged, bbolt reads the store as
// of the transaction before, so the records the last replay had stored and
// deleted came back and a replay sent them again (a second copy on a
// broker that does not deduplicate). The delivered ledger lists them: the
// replay deletes them without sending. Without the ledger (it is removed
// here to show what it does) they are sent again.
func TestRollbackDoesNotResendDelivered(t *testing.T) {
	dir := fastDir(t)
	path, want := buildDamageStore(t, dir)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	ps := os.Getpagesize()
	txid := func(page int) uint64 { return binary.LittleEndian.Uint64(data[page*ps+16+48:]) }
	current := 0
	if txid(1) > txid(0) {
		current = 1
	}
	data[current*ps+16+56] ^= 0xff // its checksum

	for _, withLedger := range []bool{true, false} {
		cp := copyStore(t, dir, path, data)
		if !withLedger {
			require.NoError(t, os.Remove(cp+".delivered"))
		}
		rep, err := deadletter.Check(cp)
		require.NoError(t, err)
		assert.Contains(t, rep.MetaNote, fmt.Sprintf("meta page %d", current))
		s, err := deadletter.Open(cp)
		require.NoError(t, err, "a damaged meta page alone is bbolt's fallback: the store opens")
		sk := &sink{}
		res, err := s.Replay(context.Background(), sk, deadletter.ReplayOptions{})
		require.NoError(t, err)
		require.NoError(t, s.Close())
		if withLedger {
			assert.Equal(t, deadletter.ReplayResult{Stored: damageKept, AlreadyDelivered: damageBack}, res)
			checkOutcome(t, "with the ledger", want, damageOutcome{replay: res, sent: sk.sent})
			continue
		}
		assert.Equal(t, deadletter.ReplayResult{Stored: damageKept + damageBack}, res, "without the ledger, what was delivered is sent again")
	}
}

// TestLedgerStaysSmall: the delivered ledger keeps only the entries that a
// meta page of the store can still bring back, so after a replay it holds
// at most the last page's, and after a later write none.
func TestLedgerStaysSmall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dead.db")
	s := openStore(t, path)
	for i := range 300 {
		require.NoError(t, s.Put(letter(fmt.Sprintf("m-%03d", i), "")))
	}
	res, err := s.Replay(context.Background(), &sink{}, deadletter.ReplayOptions{})
	require.NoError(t, err)
	require.Equal(t, 300, res.Stored)
	info, err := os.Stat(path + ".delivered")
	require.NoError(t, err)
	assert.Less(t, info.Size(), int64(64*64), "the ledger holds at most the last page's entries")

	require.NoError(t, s.Put(letter("later", "")))
	_, err = s.Replay(context.Background(), &sink{}, deadletter.ReplayOptions{})
	require.NoError(t, err)
	info, err = os.Stat(path + ".delivered")
	require.NoError(t, err)
	assert.Less(t, info.Size(), int64(100), "one entry left: the last delete's")
}
