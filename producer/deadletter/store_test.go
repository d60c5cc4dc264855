package deadletter_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rocketry-go/rocketry/brokercode"
	"github.com/rocketry-go/rocketry/producer"
	"github.com/rocketry-go/rocketry/producer/deadletter"
)

// The child process of TestTwoProcessesOneStore: when these variables are
// set, TestMain puts records into the store and exits.
const (
	envChildStore = "DEADLETTER_TEST_CHILD_STORE"
	envChildCount = "DEADLETTER_TEST_CHILD_COUNT"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(envChildStore); path != "" {
		os.Exit(childPut(path, os.Getenv(envChildCount)))
	}
	goleak.VerifyTestMain(m)
}

// childPut opens the store at path, waiting up to a minute for its lock,
// and puts n records "child-0".. into it.
func childPut(path, count string) int {
	n, err := strconv.Atoi(count)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s, err := deadletter.Open(path, deadletter.WithLockTimeout(time.Minute))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for i := range n {
		if err := s.Put(letter(fmt.Sprintf("child-%d", i), "")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// letter is a dead letter of message id on topic "orders", pinned to at.
func letter(id, at string) *producer.DeadLetter {
	return &producer.DeadLetter{
		Message:  &producer.Message{ID: id, Topic: "orders", Tag: "t", Keys: []string{"k"}, Properties: map[string]string{"p": "v"}, Body: []byte("body of " + id)},
		Err:      "unavailable",
		Attempts: 3, Code: brokercode.Unavailable,
		MaybeStoredAt:  at,
		DeadLetteredAt: time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC),
	}
}

func openStore(t *testing.T, path string, opts ...deadletter.Option) *deadletter.Store {
	t.Helper()
	s, err := deadletter.Open(path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func ids(t *testing.T, s *deadletter.Store) []string {
	t.Helper()
	var out []string
	require.NoError(t, s.Scan(func(d *producer.DeadLetter, err error) error {
		if err != nil {
			return err
		}
		out = append(out, d.Message.ID)
		return nil
	}))
	return out
}

func TestPutGetRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dead.db")
	s := openStore(t, path)
	want := letter("m-1", "127.0.0.1:7777")
	want.Message.Transactional = true
	require.NoError(t, s.Put(want))
	fifo := letter("m-3", "")
	fifo.Message.MessageGroup = "order-42"
	require.NoError(t, s.Put(fifo))
	timed := letter("m-4", "")
	timed.Message.DeliveryTime = time.Date(2030, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	require.NoError(t, s.Put(timed))
	require.NoError(t, s.Close())

	s = openStore(t, path) // survives a reopen
	got, err := s.Get("m-1")
	require.NoError(t, err)
	want.SendError = nil
	assert.Equal(t, want, got)
	for _, w := range []*producer.DeadLetter{fifo, timed} { // a FIFO or timed message stays one
		got, err := s.Get(w.Message.ID)
		require.NoError(t, err)
		w.SendError = nil
		assert.Equal(t, w.Message.MessageGroup, got.Message.MessageGroup)
		assert.True(t, w.Message.DeliveryTime.Equal(got.Message.DeliveryTime), "delivery time %v; want %v", got.Message.DeliveryTime, w.Message.DeliveryTime)
	}
	_, err = s.Get("m-2")
	assert.ErrorIs(t, err, deadletter.ErrNotFound)

	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "the store holds message bodies")
}

// TestPutSameIDKeepsOneRecord: one ID is one record; a later put keeps the
// first time and an endpoint the message may still be stored on.
func TestPutSameIDKeepsOneRecord(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "dead.db"))
	first := letter("m-1", "a:1")
	require.NoError(t, s.Put(first))
	again := letter("m-1", "")
	again.Attempts, again.Err, again.DeadLetteredAt = 5, "timeout", first.DeadLetteredAt.Add(time.Hour)
	require.NoError(t, s.Put(again))

	n, err := s.Len()
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	got, err := s.Get("m-1")
	require.NoError(t, err)
	assert.Equal(t, 5, got.Attempts)
	assert.Equal(t, "timeout", got.Err)
	assert.Equal(t, "a:1", got.MaybeStoredAt, "the endpoint where it may be stored is kept")
	assert.True(t, got.DeadLetteredAt.Equal(first.DeadLetteredAt), "DeadLetteredAt = %v; want the first, %v", got.DeadLetteredAt, first.DeadLetteredAt)

	moved := letter("m-1", "b:2")
	require.NoError(t, s.Put(moved))
	got, err = s.Get("m-1")
	require.NoError(t, err)
	assert.Equal(t, "b:2", got.MaybeStoredAt, "the last unknown outcome wins")
}

func TestPutRefuses(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "dead.db"))
	assert.ErrorIs(t, s.Put(nil), producer.ErrInvalidMessage)
	assert.ErrorIs(t, s.Put(&producer.DeadLetter{}), producer.ErrInvalidMessage)
	assert.ErrorIs(t, s.Put(&producer.DeadLetter{Message: &producer.Message{Topic: "t"}}), producer.ErrInvalidMessage)
	n, err := s.Len()
	require.NoError(t, err)
	assert.Zero(t, n)
}

// TestLongIDs: an ID longer than a bbolt key is kept under its hash, still
// one record per ID.
func TestLongIDs(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "dead.db"))
	long := string(make([]byte, 40<<10))
	require.NoError(t, s.Put(letter(long, "")))
	require.NoError(t, s.Put(letter(long, "")))
	got, err := s.Get(long)
	require.NoError(t, err)
	assert.Equal(t, long, got.Message.ID)
	n, err := s.Len()
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	require.NoError(t, s.Delete(long))
	n, err = s.Len()
	require.NoError(t, err)
	assert.Zero(t, n)
}

func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	file := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, data, 0o600))
		return p
	}
	foreign := file("foreign", []byte("this is not a store, not even close: it is much longer than a bbolt meta page would have to be to be read as one, so it fails its checks"))
	old := file("old.spool", append([]byte("RKTSPOOL"), 1, 0, 0, 0))

	_, err := deadletter.Open(foreign)
	assert.ErrorIs(t, err, deadletter.ErrNotStore)
	assert.Contains(t, err.Error(), foreign)

	_, err = deadletter.Open(old)
	assert.ErrorIs(t, err, deadletter.ErrOldSpool)
	assert.Contains(t, err.Error(), "rocketry spool import "+old)
	data, rerr := os.ReadFile(old)
	require.NoError(t, rerr)
	assert.Equal(t, append([]byte("RKTSPOOL"), 1, 0, 0, 0), data, "an old spool is left untouched")

	_, err = deadletter.Open(filepath.Join(dir, "missing", "dead.db"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	_, err = deadletter.Open(dir)
	assert.Error(t, err)
	_, err = deadletter.Open("")
	assert.ErrorContains(t, err, "path is empty")
	_, err = deadletter.Open(filepath.Join(dir, "x.db"), deadletter.WithLockTimeout(0))
	assert.ErrorContains(t, err, "WithLockTimeout(0s): must be > 0")
	_, err = deadletter.Open(filepath.Join(dir, "none.db"), deadletter.WithReadOnly())
	assert.ErrorIs(t, err, os.ErrNotExist, "read-only does not create")
}

// TestSecondOpenIsLocked is a regression test of issue 13's third item:
// the old spool's guard compared filepath.Abs paths within one process, so
// the same file through a symbolic link to its directory was opened twice
// and the two writers overwrote each other's records. The store's lock is on
// the file, whatever names it.
func TestSecondOpenIsLocked(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dead.db")
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(dir, link))
	s := openStore(t, path)
	require.NoError(t, s.Put(letter("m-1", "")))

	for _, p := range []string{path, filepath.Join(link, "dead.db")} {
		_, err := deadletter.Open(p, deadletter.WithLockTimeout(20*time.Millisecond))
		require.ErrorIs(t, err, deadletter.ErrLocked, "Open(%s) while the store is open", p)
		assert.Contains(t, err.Error(), p)
	}
	// A read-only look waits for the writer too.
	_, err := deadletter.Open(path, deadletter.WithReadOnly(), deadletter.WithLockTimeout(20*time.Millisecond))
	assert.ErrorIs(t, err, deadletter.ErrLocked)

	require.NoError(t, s.Close())
	s2 := openStore(t, filepath.Join(link, "dead.db"))
	assert.Equal(t, []string{"m-1"}, ids(t, s2))
}

// TestTwoProcessesOneStore is a regression test of issue 13's third item:
// two processes appending to one spool path lost about half the records
// (no lock between processes; each wrote at its own offset). Here a second
// process (this test binary again) opens the store while this one holds it
// and puts records: it waits for the lock, and no record of either is lost.
func TestTwoProcessesOneStore(t *testing.T) {
	const n = 200
	path := filepath.Join(t.TempDir(), "dead.db")
	s, err := deadletter.Open(path)
	require.NoError(t, err)

	exe, err := os.Executable()
	require.NoError(t, err)
	child := exec.Command(exe, "-test.run", "^$")
	child.Env = append(os.Environ(), envChildStore+"="+path, envChildCount+"="+strconv.Itoa(n))
	out, err := os.CreateTemp(t.TempDir(), "child")
	require.NoError(t, err)
	child.Stdout, child.Stderr = out, out
	require.NoError(t, child.Start())

	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < n; i += 4 {
				assert.NoError(t, s.Put(letter(fmt.Sprintf("parent-%d", i), "")))
			}
		})
	}
	wg.Wait()
	require.NoError(t, s.Close()) // the child gets the lock now
	if err := child.Wait(); err != nil {
		b, _ := os.ReadFile(out.Name())
		t.Fatalf("child process: %v: %s", err, b)
	}

	s = openStore(t, path)
	got := map[string]bool{}
	for _, id := range ids(t, s) {
		got[id] = true
	}
	for i := range n {
		assert.True(t, got[fmt.Sprintf("parent-%d", i)], "parent-%d lost", i)
		assert.True(t, got[fmt.Sprintf("child-%d", i)], "child-%d lost", i)
	}
	assert.Len(t, got, 2*n)
}

func TestClosed(t *testing.T) {
	s, err := deadletter.Open(filepath.Join(t.TempDir(), "dead.db"))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	err = s.Put(letter("m-1", ""))
	assert.True(t, errors.Is(err, deadletter.ErrClosed), "Put after Close = %v; want ErrClosed", err)
}
