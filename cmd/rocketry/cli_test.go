package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/rocketry-go/rocketry/producer"
	"github.com/rocketry-go/rocketry/producer/deadletter"
)

// These tests drive the built command as a user does: real processes, real
// signals, exit statuses and output. The binary is built once, by the
// first test that needs it, and removed by TestMain.

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// rocketryBin returns the path of the built command, or of the binary
// $ROCKETRY_TEST_BINARY names (to run these tests against another build,
// such as an older one).
func rocketryBin(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("ROCKETRY_TEST_BINARY"); bin != "" {
		return bin
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "rocketry-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "rocketry")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = &buildError{err: err, out: string(out)}
		}
	})
	if binErr != nil {
		t.Fatalf("building the command: %v", binErr)
	}
	return binPath
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

// proc is one run of the command.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	done           chan struct{}
	code           int
}

// startBin starts the command with args; stdin, when not nil, is its
// input. The process is killed at the end of the test if still running
// (a hang guard, not a time check).
func startBin(t *testing.T, stdin []byte, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{done: make(chan struct{})}
	p.cmd = exec.Command(rocketryBin(t), args...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.Env = append(os.Environ(), env...)
	if stdin != nil {
		p.cmd.Stdin = bytes.NewReader(stdin)
	}
	require.NoError(t, p.cmd.Start())
	go func() {
		defer close(p.done)
		err := p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		if ee, ok := err.(*exec.ExitError); ok && !ee.Exited() {
			p.code = -1 // killed by a signal: no exit status
		}
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for the process to exit, within the hang guard, and returns
// its exit status (-1 when a signal killed it).
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%v did not exit; stderr:\n%s", p.cmd.Args, p.stderr.String())
	}
	return p.code
}

func (p *proc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig))
}

// interrupt sends SIGINT, requires exit 130, and reads the JSON summary
// on stdout into sum.
func (p *proc) interrupt(t *testing.T, sum any) {
	t.Helper()
	p.signal(t, syscall.SIGINT)
	require.Equal(t, exitInterrupted, p.wait(t), "stderr:\n%s", p.stderr.String())
	require.NoError(t, json.Unmarshal([]byte(p.stdout.String()), sum), "stdout %q", p.stdout.String())
}

// until polls cond every few milliseconds until it holds, within the hang
// guard; the process exiting first fails the test.
func (p *proc) until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.After(time.Minute); !cond(); {
		select {
		case <-p.done:
			t.Fatalf("%v exited with %d before %s; stderr:\n%s", p.cmd.Args[1:], p.code, what, p.stderr.String())
		case <-deadline:
			t.Fatalf("waited a minute for %s", what)
		case <-tick.C:
		}
	}
}

// spooledIDs reads the IDs in a dead-letter store.
func spooledIDs(t *testing.T, path string) map[string]bool {
	t.Helper()
	s, err := deadletter.Open(path, deadletter.WithReadOnly())
	require.NoError(t, err, "opening the store")
	defer s.Close()
	ids := map[string]bool{}
	require.NoError(t, s.Scan(func(d *producer.DeadLetter, err error) error {
		if err != nil {
			return err
		}
		ids[d.Message.ID] = true
		return nil
	}), "reading the store")
	return ids
}

// TestSignalProduce pins issue 14, item 1: SIGINT during produce stops
// taking messages, gives the sends in flight --grace, spools what Close
// cancelled, prints the summary and exits 130. Before, the process died at
// once: exit by signal, no summary, the sends in flight neither stored nor
// spooled.
func TestSignalProduce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		latency time.Duration // of each send at the broker
		args    []string
	}{
		// The sends in flight finish within the default --grace.
		{"async", 300 * time.Millisecond, []string{"--async"}},
		// The send in flight outlives --grace: Close cancels it, and it
		// goes to the spool.
		{"sync grace", time.Hour, []string{"--grace", "50ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := brokertest.Start(t, broker.WithFaults(broker.Faults{Latency: tc.latency}))
			spool := filepath.Join(t.TempDir(), "dead.spool")
			p := startBin(t, nil, nil, append([]string{"produce", "--addr", b.Addr(), "--topic", "t", "--count", "100000",
				"--spool", spool, "--json"}, tc.args...)...)
			p.until(t, "a send at the broker", func() bool { return b.Stats().GetSendRequests() > 0 })
			var sum produceSummary
			p.interrupt(t, &sum)
			assert.Equal(t, errInterrupted.Error(), sum.Stopped)
			assert.Positive(t, sum.Sent)
			if tc.latency == time.Hour {
				assert.Equal(t, int64(1), sum.Cancelled, "the send in flight at the end of --grace")
			} else {
				assert.Positive(t, sum.Stored, "sends in flight finish within --grace")
			}
			assert.Equal(t, sum.Failed, sum.Spooled, "every message not stored is in the spool")
			assert.Equal(t, int64(100000)-sum.Sent, sum.NotSent)
			stored, spooled := storedIDs(b, "t"), spooledIDs(t, spool)
			assert.Equal(t, int(sum.Stored), len(stored))
			assert.Equal(t, int(sum.Spooled), len(spooled))
			assert.Equal(t, sum.Sent, sum.Stored+sum.Spooled, "nothing lost")
			assert.Contains(t, p.stderr.String(), "rocketry produce: interrupted by a signal: no new messages; the sends in flight get --grace")
		})
	}
}

// TestSignalTwiceExitsAtOnce: a second signal does not wait for --grace.
func TestSignalTwiceExitsAtOnce(t *testing.T) {
	b := brokertest.Start(t, broker.WithFaults(broker.Faults{Latency: time.Hour}))
	p := startBin(t, nil, nil, "produce", "--addr", b.Addr(), "--topic", "t", "--count", "10", "--async")
	p.until(t, "a send at the broker", func() bool { return b.Stats().GetSendRequests() > 0 })
	p.signal(t, syscall.SIGTERM)
	p.until(t, "the first signal's note", func() bool { return strings.Contains(p.stderr.String(), "a second signal exits at once") })
	p.signal(t, syscall.SIGINT)
	require.Equal(t, exitInterrupted, p.wait(t), "stderr:\n%s", p.stderr.String())
	assert.Contains(t, p.stderr.String(), "rocketry produce: interrupt again: exiting now")
}

// TestSignalReplay pins item 1 for replay: SIGINT stops it between
// records, the summary is printed, exit 130, and the records not tried stay
// in the spool.
func TestSignalReplay(t *testing.T) {
	b := brokertest.Start(t, broker.WithFaults(broker.Faults{Latency: 20 * time.Millisecond}))
	path := writeSpool(t, 5000)
	p := startBin(t, nil, nil, "replay", "--addr", b.Addr(), "--spool", path, "--json")
	p.until(t, "a record stored", func() bool { return b.Stats().GetStored() > 0 })
	var sum replaySummary
	p.interrupt(t, &sum)
	assert.Equal(t, errInterrupted.Error(), sum.Stopped)
	assert.Positive(t, sum.Left)
	assert.Equal(t, 5000, sum.Read+sum.Left, "every record read or left")
	assert.Empty(t, sum.Error, "a stop is not an error")
	assert.Equal(t, len(storedIDs(b, "orders")), sum.Stored)
	assert.Len(t, spooledIDs(t, path), 5000-sum.Stored, "what was not stored stays in the spool")
}

// TestSignalDemo pins item 1 for the demo: SIGINT ends the run with the
// summary (nothing lost), exit 130, and the temporary spool removed.
func TestSignalDemo(t *testing.T) {
	tmp := t.TempDir()
	p := startBin(t, nil, []string{"TMPDIR=" + tmp}, append([]string{"demo", "--json", "--messages", "1000000"}, smallDemoRest...)...)
	p.until(t, "the demo's temporary directory", func() bool {
		m, _ := filepath.Glob(filepath.Join(tmp, "rocketry-demo-*"))
		return len(m) > 0
	})
	var sum demoSummary
	p.interrupt(t, &sum)
	assert.Equal(t, errInterrupted.Error(), sum.Stopped)
	assert.Zero(t, sum.Lost)
	assert.Positive(t, sum.NotSent)
	assert.Equal(t, 1000000, sum.Sent+sum.NotSent)
	left, err := filepath.Glob(filepath.Join(tmp, "rocketry-demo-*"))
	require.NoError(t, err)
	assert.Empty(t, left, "the demo's temporary files are removed")
}

// smallDemoRest is smallDemo without its message count and timeout.
var smallDemoRest = []string{
	"--sync-workers", "4", "--max-in-flight", "64", "--max-backlog", "100", "--consume-rate", "600",
	"--cold-read-distance", "20", "--max-storage-load", "200", "--reread-rate", "5000", "--reset-at", "0.3",
	"--restart-at", "0", "--internal-rate", "0.05", "--time-scale", "0.005", "--max-attempts", "5",
}

// TestErrorOneLine: the CLI's share of item 2. A send that fails prints one
// line, "rocketry produce: ...", with no package prefix repeated inside it
// and no raw gRPC status text. Before: "rocketry produce: producer: send
// ... rpc error: code = DeadlineExceeded desc = producer: ...".
func TestErrorOneLine(t *testing.T) {
	b := brokertest.Start(t, broker.WithFaults(broker.Faults{Latency: time.Second}))
	p := startBin(t, nil, nil, "produce", "--addr", b.Addr(), "--topic", "t", "--count", "1", "--max-attempts", "1", "--attempt-timeout", "50ms")
	require.Equal(t, 1, p.wait(t))
	stderr := p.stderr.String()
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	require.Len(t, lines, 1, "stderr %q", stderr)
	assert.True(t, strings.HasPrefix(lines[0], "rocketry produce: send of message "), "stderr %q", stderr)
	assert.NotContains(t, stderr, "producer:")
	assert.NotContains(t, stderr, "rpc error")
	assert.Contains(t, stderr, "attempts exhausted): DeadlineExceeded: ")
}

// TestProgressReplay pins item 3: replay against a throttling broker shows
// its progress on a terminal (before: nothing until the end), and nothing
// with --quiet.
func TestProgressReplay(t *testing.T) {
	// 20 sends a second, after a burst of 20: the replay of 60 records,
	// one at a time, is throttled.
	b := brokertest.Start(t, broker.WithThrottle(broker.Throttle{MaxSendRate: 20}))
	path := writeSpool(t, 60)
	code, stdout, screen := runOnTTY(t, "replay", "--addr", b.Addr(), "--spool", path, "--max-attempts", "100")
	require.Equal(t, 0, code, "terminal:\n%s", screen)
	assert.Contains(t, stdout, "replayed "+path+": read 60, stored 60")
	assert.Contains(t, screen, "replaying")
	assert.Regexp(t, `sent [\d,]+ · stored [\d,]+ · throttled [1-9][\d,]* · retries [1-9]`, screen)
	assert.Regexp(t, `\d+ msg/s · ETA \d`, screen)

	path = writeSpool(t, 10)
	code, _, screen = runOnTTY(t, "replay", "--addr", b.Addr(), "--spool", path, "--quiet")
	require.Equal(t, 0, code)
	assert.Empty(t, screen, "--quiet: no progress")
}

// TestProgressProduce: produce shows the same display on a terminal, a
// spinner for stdin whose size is unknown.
func TestProgressProduce(t *testing.T) {
	b := brokertest.Start(t, broker.WithThrottle(broker.Throttle{MaxSendRate: 20}))
	code, stdout, screen := runOnTTY(t, "produce", "--addr", b.Addr(), "--topic", "t", "--count", "60", "--max-attempts", "100")
	require.Equal(t, 0, code, "terminal:\n%s", screen)
	assert.Contains(t, stdout, "sent 60, stored 60")
	assert.Contains(t, screen, "producing")
	assert.Regexp(t, `sent [\d,]+ · stored [\d,]+ · throttled [1-9]`, screen)
}

// runOnTTY runs the command with its stderr on a pseudo-terminal and
// returns its exit status, stdout and what the terminal showed.
func runOnTTY(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	tty := openPTY(t)
	cmd := exec.Command(rocketryBin(t), args...)
	var stdout syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, tty.tty
	require.NoError(t, cmd.Start())
	tty.closeChild()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Kill() })
	defer stop()
	_ = cmd.Wait()
	return cmd.ProcessState.ExitCode(), stdout.String(), tty.output()
}

// TestDemoTimeout pins item 4: demo --timeout stops sending, counts the
// messages it never handed to the producer as never sent (not lost),
// exits 0 when nothing sent was lost, and points at no spool (its broker
// is gone). Before: thousands "lost", exit 1, "rocketry replay can send
// them" about a removed broker's spool.
func TestDemoTimeout(t *testing.T) {
	p := startBin(t, nil, nil, append([]string{"demo", "--messages", "1000000", "--timeout", "1s"}, smallDemoRest...)...)
	require.Equal(t, 0, p.wait(t), "stdout:\n%s\nstderr:\n%s", p.stdout.String(), p.stderr.String())
	out := p.stdout.String()
	assert.Regexp(t, `never sent +[1-9][\d,]* +not handed to the producer: --timeout reached`, out)
	assert.Regexp(t, `lost +0 `, out)
	assert.Regexp(t, okLine.String()+" of the ", out)
	assert.NotContains(t, out, "rocketry replay")
	assert.NotContains(t, out, "dead-letter.db")
	assert.Contains(t, p.stderr.String(), "rocketry demo: --timeout reached: no new messages")
}

// TestProduceTimeout pins item 5: produce --timeout stops taking messages,
// lets the sends in flight finish (or spools them after --grace), says how
// many were never sent, and exits 0 when every message sent was stored or
// spooled. Before: exit 1 always, the sends in flight cancelled.
func TestProduceTimeout(t *testing.T) {
	b := brokertest.Start(t, broker.WithThrottle(broker.Throttle{MaxSendRate: 2000}))
	spool := filepath.Join(t.TempDir(), "dead.spool")
	p := startBin(t, nil, nil, "produce", "--addr", b.Addr(), "--topic", "t", "--count", "1000000", "--async",
		"--timeout", "300ms", "--max-attempts", "2", "--spool", spool, "--json")
	require.Equal(t, 0, p.wait(t), "stdout:\n%s\nstderr:\n%s", p.stdout.String(), p.stderr.String())
	var sum produceSummary
	require.NoError(t, json.Unmarshal([]byte(p.stdout.String()), &sum), "stdout %q", p.stdout.String())
	assert.Equal(t, errTimedOut.Error(), sum.Stopped)
	assert.Positive(t, sum.Stored)
	assert.Equal(t, int64(1000000)-sum.Sent, sum.NotSent)
	assert.Positive(t, sum.NotSent)
	assert.Equal(t, sum.Sent, sum.Stored+sum.Spooled, "every message sent was stored or spooled")
	assert.Equal(t, int(sum.Stored), len(storedIDs(b, "t")))

	// The text summary says it in words.
	p = startBin(t, nil, nil, "produce", "--addr", b.Addr(), "--topic", "t", "--count", "1000000", "--timeout", "100ms")
	require.Equal(t, 0, p.wait(t), "stderr:\n%s", p.stderr.String())
	assert.Regexp(t, `(?m)^stopped \(--timeout reached\): [\d,]+ messages never sent$`, p.stdout.String())
}

// TestProduceStdinLongLine pins item 6: a stdin line over the body limit
// is named by its number and the limit, the lines after it are still sent,
// and the run exits 1. Before: "bufio.Scanner: token too long", and no
// later line was sent.
func TestProduceStdinLongLine(t *testing.T) {
	b := brokertest.Start(t)
	in := "first\n" + strings.Repeat("x", producer.DefaultMaxBodyBytes+10) + "\nthird\r\nfourth"
	p := startBin(t, []byte(in), nil, "produce", "--addr", b.Addr(), "--topic", "lines")
	require.Equal(t, 1, p.wait(t), "stderr:\n%s", p.stderr.String())
	assert.Equal(t, "rocketry produce: stdin line 2: longer than the 4,194,304-byte limit of a message body: not sent; reading on\n", p.stderr.String())
	assert.Contains(t, p.stdout.String(), "sent 3, stored 3")
	assert.Contains(t, p.stdout.String(), "skipped 1 stdin line over the 4,194,304-byte body limit, not sent")
	var bodies []string
	for _, m := range b.Messages("lines") {
		bodies = append(bodies, string(m.GetMessage().GetBody()))
	}
	assert.ElementsMatch(t, []string{"first", "third", "fourth"}, bodies)
}

// docsWalkthrough returns the first shell block of docs/cli.md, the
// command line's walk-through (linked from the README).
func docsWalkthrough(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(data), "A walk-through on one machine")
	require.True(t, ok, "docs/cli.md has no walk-through")
	_, block, ok := strings.Cut(section, "```sh\n")
	require.True(t, ok, "the walk-through section has no sh block")
	block, _, ok = strings.Cut(block, "```")
	require.True(t, ok)
	return block
}

// TestDocsWalkthrough runs docs/cli.md's walk-through as written, from
// the repository's root, with two changes that keep parallel runs apart:
// /tmp/ is a directory of the test's own, and $ROCKETRY_ADDR gives every
// command a free port instead of 127.0.0.1:7777. It checks that the broker
// throttled for BACKLOG (stats says so), that the replay ran, and that the
// last line stopped the broker and the consumer. Before, the walk-through
// never throttled (no consumer group existed while produce ran), and its
// kill %1 left the broker that go run had started running.
func TestDocsWalkthrough(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	block := docsWalkthrough(t)
	for _, want := range []string{"--max-backlog 1000", "/tmp/rocketry stats", "kill "} {
		require.Contains(t, block, want, "the walk-through changed: update this test")
	}
	dir := t.TempDir()
	script := strings.ReplaceAll(block, "/tmp/", dir+"/")

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // hang guard
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), addrEnv+"="+addr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	pgid := cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) }) // whatever the script left behind
	err = cmd.Wait()
	log := out.String()
	require.NoError(t, err, "the walk-through failed:\n%s", log)

	assert.Regexp(t, `(?m)^throttled: BACKLOG [1-9]\d*,`, log, "stats shows the BACKLOG throttling")
	assert.Regexp(t, `(?m)^sent 10,000, stored [\d,]+ .* \([1-9][\d,]* throttled\)`, log, "produce's summary counts the throttled attempts")
	assert.Regexp(t, `(?m)^replayed `+dir+`/dead.db: read \d+`, log)
	pidFile := filepath.Join(dir, "rocketry-broker.pid")
	require.Eventually(t, func() bool {
		_, err := os.Stat(pidFile)
		return os.IsNotExist(err) // the broker stopped: it removes its pid file
	}, 30*time.Second, 10*time.Millisecond, "the broker still runs after the walk-through's kill:\n%s", log)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "received ") },
		30*time.Second, 10*time.Millisecond, "the consumer did not stop after the walk-through's kill")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		// A replay that stored something keeps its delivered ledger beside
		// the store (producer/deadletter): there is one when the run
		// dead-lettered a message, none when it did not.
		if e.Name() != "dead.db.delivered" {
			names = append(names, e.Name())
		}
	}
	assert.ElementsMatch(t, []string{"rocketry", "dead.db"}, names, "the walk-through writes only under /tmp")
}
