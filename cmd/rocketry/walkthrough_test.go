package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeWalkthrough returns the shell block of the README's section "The
// standalone broker and the command line".
func readmeWalkthrough(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(data), "## The standalone broker and the command line")
	require.True(t, ok, "README has no walk-through section")
	_, block, ok := strings.Cut(section, "```sh\n")
	require.True(t, ok, "the walk-through section has no sh block")
	block, _, ok = strings.Cut(block, "```")
	require.True(t, ok)
	return block
}

// TestReadmeWalkthrough runs the README's walk-through as written, from
// the repository's root, with two changes that keep parallel runs apart:
// /tmp/ is a directory of the test's own, and $ROCKETRY_ADDR gives every
// command a free port instead of 127.0.0.1:7777. It checks that the broker
// throttled for BACKLOG (stats says so), that the replay ran, and that the
// last line stopped the broker and the consumer. Before, the walk-through
// never throttled (no consumer group existed while produce ran), and its
// kill %1 left the broker that go run had started running.
func TestReadmeWalkthrough(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	block := readmeWalkthrough(t)
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
	assert.Regexp(t, `(?m)^replayed `+dir+`/dead.spool: read \d+`, log)
	pidFile := filepath.Join(dir, "rocketry-broker.pid")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(pidFile); os.IsNotExist(err) {
			break // the broker stopped: it removes its pid file
		}
		if time.Now().After(deadline) {
			t.Fatalf("the broker still runs after the walk-through's kill:\n%s", log)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "received "); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the consumer did not stop after the walk-through's kill:\n%s", out.String())
		}
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{"rocketry", "dead.spool"}, names, "the walk-through writes only under /tmp")
}
