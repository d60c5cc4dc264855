package chaos_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/rocketry-go/rocketry/producer"
	"github.com/rocketry-go/rocketry/producer/deadletter"
)

// storeProcessEnv makes the test binary a second producer process on one
// dead-letter store (TestChaosTwoProcessesOneStore): the variable holds
// the store's path, storeAddrEnv the broker's address, storeCountEnv how
// many messages to send.
const (
	storeProcessEnv = "ROCKETRY_CHAOS_STORE_PROCESS"
	storeAddrEnv    = "ROCKETRY_CHAOS_STORE_ADDR"
	storeCountEnv   = "ROCKETRY_CHAOS_STORE_COUNT"
)

// storeProcessResult is what the second process prints, as its last line.
type storeProcessResult struct {
	Sent, Stored, Spooled, Lost int
}

// storeProcess opens the store: first with a short lock timeout, which
// must fail while the first process holds it (it prints "locked"), then
// waiting for the lock. It then sends its messages "two-0".. with the store
// as the dead-letter sink and prints its counts.
func storeProcess() int {
	path, addr := os.Getenv(storeProcessEnv), os.Getenv(storeAddrEnv)
	n, err := strconv.Atoi(os.Getenv(storeCountEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s, err := deadletter.Open(path, deadletter.WithLockTimeout(50*time.Millisecond))
	if !errors.Is(err, deadletter.ErrLocked) {
		fmt.Printf("not locked: %v\n", err)
		if err == nil {
			s.Close()
		}
		return 1
	}
	fmt.Println("locked")
	if s, err = deadletter.Open(path, deadletter.WithLockTimeout(2*time.Minute)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	p, err := producer.New(addr, producer.WithProtocol(producer.RocketryV1), producer.WithDeadLetterSink(s), producer.WithMaxAttempts(2), producer.WithAttemptTimeout(time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var res storeProcessResult
	for i := range n {
		res.Sent++
		_, err := p.Send(context.Background(), &producer.Message{ID: fmt.Sprintf("two-%d", i), Topic: topic, Body: []byte("from the second process")})
		var se *producer.SendError
		switch {
		case err == nil:
			res.Stored++
		case errors.As(err, &se) && se.DeadLettered:
			res.Spooled++
		default:
			res.Lost++
		}
	}
	if err := p.Close(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	return 0
}

// TestChaosTwoProcessesOneStore is the two-process run on one store (issue
// 13's third item: two processes with one spool path lost about half the
// records). This process and a second one (the test binary again) send to
// one broker that fails half the calls, each with the same store as its
// dead-letter sink. The second finds the store locked, waits for it, then
// sends; at the end every failed message of both is in the store, once, and
// a replay stores every message once.
func TestChaosTwoProcessesOneStore(t *testing.T) {
	const n = 300
	b := brokertest.Start(t, broker.WithFaults(broker.Faults{InternalRate: 0.5}), broker.WithSeed(13))
	path := filepath.Join(t.TempDir(), "dead.db")
	store, err := deadletter.Open(path)
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			store.Close()
		}
	}()

	exe, err := os.Executable()
	require.NoError(t, err)
	child := exec.Command(exe, "-test.run", "^$")
	child.Env = append(os.Environ(), storeProcessEnv+"="+path, storeAddrEnv+"="+b.Addr(), storeCountEnv+"="+strconv.Itoa(n))
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	var stderr lockedBuffer
	child.Stderr = &stderr
	require.NoError(t, child.Start())
	lines := bufio.NewScanner(stdout)

	p, err := producer.New(b.Addr(), producer.WithProtocol(producer.RocketryV1), producer.WithDeadLetterSink(store), producer.WithMaxAttempts(2), producer.WithAttemptTimeout(time.Second))
	require.NoError(t, err)
	spooled := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < n; i += 4 {
				_, err := p.Send(context.Background(), &producer.Message{ID: fmt.Sprintf("one-%d", i), Topic: topic, Body: []byte("from the first process")})
				var se *producer.SendError
				switch {
				case err == nil:
				case errors.As(err, &se) && se.DeadLettered:
					mu.Lock()
					spooled++
					mu.Unlock()
				default:
					t.Errorf("one-%d: %v; want stored or spooled", i, err)
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, p.Close(context.Background()))
	// The second process found the store locked while this one held it.
	require.True(t, lines.Scan(), "second process: no output; stderr %q", stderr.String())
	require.Equal(t, "locked", lines.Text(), "stderr %q", stderr.String())
	require.NoError(t, store.Close()) // the second process gets the lock now
	closed = true

	var last string
	for lines.Scan() {
		last = lines.Text()
	}
	if err := child.Wait(); err != nil {
		t.Fatalf("second process: %v; stderr %q", err, stderr.String())
	}
	var two storeProcessResult
	require.NoError(t, json.Unmarshal([]byte(last), &two), "second process printed %q", last)
	assert.Equal(t, storeProcessResult{Sent: n, Stored: two.Stored, Spooled: n - two.Stored}, two)
	require.Positive(t, spooled, "the first process spooled nothing: the run proves nothing")
	require.Positive(t, two.Spooled, "the second process spooled nothing: the run proves nothing")

	store, err = deadletter.Open(path)
	require.NoError(t, err)
	closed = false
	count, err := store.Len()
	require.NoError(t, err)
	assert.Equal(t, spooled+two.Spooled, count, "records: every failure of both processes, once")

	require.NoError(t, b.SetFaults(broker.Faults{}))
	rp, err := producer.New(b.Addr(), producer.WithProtocol(producer.RocketryV1))
	require.NoError(t, err)
	defer rp.Close(context.Background())
	res, err := store.Replay(context.Background(), rp, deadletter.ReplayOptions{})
	require.NoError(t, err)
	assert.Equal(t, count, res.Stored)
	held := map[string]int{}
	for _, m := range b.Messages(topic) {
		held[m.GetMessage().GetMessageId()]++
	}
	for i := range n {
		for _, id := range []string{fmt.Sprintf("one-%d", i), fmt.Sprintf("two-%d", i)} {
			assert.Equal(t, 1, held[id], "%s stored", id)
		}
	}
	t.Logf("two processes, one store: %d messages each; spooled %d and %d, all replayed once", n, spooled, two.Spooled)
}

// lockedBuffer is a bytes buffer safe for a child process's writes and the
// test's reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}

// replay resends the store to every (calm) broker, then checks that every
// message is stored, that no broker stored one twice, and counts those the
// replay stored on a second broker (before is how many brokers held each
// ID before it).
func replay(t *testing.T, sc scenario, lbs []*liveBroker, store *deadletter.Store, before map[string]int, o *outcome) {
	t.Helper()
	live := make([]string, 0, len(lbs))
	for _, lb := range lbs {
		live = append(live, lb.addr)
	}
	p, err := producer.New(strings.Join(live, ","), producer.WithProtocol(producer.RocketryV1), producer.WithMaxAttempts(5), producer.WithAttemptTimeout(2*time.Second))
	if err != nil {
		t.Fatalf("producer.New() = %v", err)
	}
	defer p.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := store.Replay(ctx, p, deadletter.ReplayOptions{})
	if err != nil || res.Failed != 0 || res.Corrupt != 0 || res.Left != 0 {
		t.Errorf("Replay() = %+v, %v; want every record stored", res, err)
	}
	o.replayed = res.Stored
	seen := map[string]int{}
	for _, lb := range lbs {
		per := map[string]int{}
		for _, rm := range lb.b.Messages(topic) {
			per[rm.GetMessage().GetMessageId()]++
		}
		for id, c := range per {
			seen[id]++
			if c > 1 {
				o.replayDup++
			}
		}
	}
	for i := range sc.messages {
		id := msgID(sc.seed, i)
		if seen[id] == 0 {
			o.replayMissing++
		}
		if seen[id] > 1 && before[id] < 2 {
			o.replayCross++
		}
	}
}
