package interop_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// summary is produce.js's JSON summary.
type summary struct {
	Client struct {
		Package string `json:"package"`
		Version string `json:"version"`
	} `json:"client"`
	Error     string  `json:"error"`
	StartupMs float64 `json:"startupMs"`
	SendMs    float64 `json:"sendMs"`
	Settings  []struct {
		Settings json.RawMessage `json:"settings"`
	} `json:"settings"`
	StartupError  *clientError `json:"startupError"`
	ShutdownError *clientError `json:"shutdownError"`
	Sent          int          `json:"sent"`
	Failed        int          `json:"failed"`
	SendRequests  int          `json:"sendRequests"`
	Messages      []message    `json:"messages"`
}

// message is one message of the summary: sent with a receipt, or failed
// with the error send() rejected with, and each SendMessage call that
// carried it.
type message struct {
	Index     int    `json:"index"`
	MessageID string `json:"messageId"`
	OK        bool   `json:"ok"`
	Receipt   *struct {
		MessageID string `json:"messageId"`
		Offset    int64  `json:"offset"`
	} `json:"receipt"`
	Error    *clientError `json:"error"`
	Attempts []attempt    `json:"attempts"`
}

// attempt is one SendMessage call: answered with a RocketMQ code (the
// first bad entry's, else the top-level one) or failed with an error.
type attempt struct {
	AtMs       float64      `json:"atMs"`
	DurationMs float64      `json:"durationMs"`
	Endpoints  string       `json:"endpoints"`
	Code       int          `json:"code"`
	Error      *clientError `json:"error"`
}

// unknownOutcomes counts the attempts at m whose outcome the client could
// not know: no answer (their RPC failed) or 50001 INTERNAL_SERVER_ERROR,
// which a proxy answers after the broker stored the message too. The
// broker may have stored the message on each.
func (m message) unknownOutcomes() int {
	n := 0
	for _, a := range m.Attempts {
		switch {
		case a.Error != nil && a.Error.GRPCCode != nil,
			a.Error != nil && a.Error.Code == internalServerError,
			a.Error == nil && a.Code == internalServerError:
			n++
		}
	}
	return n
}

func (a attempt) outcome() string {
	if a.Error != nil {
		return a.Error.String()
	}
	return strconv.Itoa(a.Code)
}

// clientError is an error as produce.js reports it: a RocketMQ status the
// client raised (Code), a gRPC error (GRPCCode) or another error.
type clientError struct {
	Name     string `json:"name"`
	Code     int    `json:"code"`
	GRPCCode *int   `json:"grpcCode"`
	Message  string `json:"message"`
}

func (e *clientError) String() string {
	switch {
	case e.GRPCCode != nil:
		return fmt.Sprintf("grpc %d", *e.GRPCCode)
	case e.Code != 0:
		return fmt.Sprintf("%s %d", e.Name, e.Code)
	}
	return e.Name + ": " + e.Message
}

// runProduce runs produce.js with args and returns its summary and stderr.
// It fails the test when the script does not exit 0 with a summary.
func runProduce(t *testing.T, nodeModules string, args ...string) (summary, string) {
	t.Helper()
	argv, env := nodeArgv(t, nodeModules, "produce.js", args...)
	var s summary
	return s, runProgram(t, "node produce.js", nodeTimeout, argv, env, &s)
}

// installClient returns a node_modules directory holding the client as
// node/package-lock.json pins it. It runs `npm ci` once per lock file into
// a directory of the user cache named after the files' hash, installing
// aside and renaming so that a half-done install is never used. It skips
// the test only when node or npm is missing.
func installClient(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not on PATH (%v): this test runs the official RocketMQ Node.js client and needs Node.js 18+ with npm", tool, err)
		}
	}
	h := sha256.New()
	files := map[string][]byte{}
	for _, name := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join("node", name))
		require.NoError(t, err)
		files[name] = b
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
	}
	key := hex.EncodeToString(h.Sum(nil))[:16]

	root := t.TempDir()
	if dir, err := os.UserCacheDir(); err == nil {
		root = filepath.Join(dir, "rocketry", "interop-node")
	}
	dir := filepath.Join(root, key)
	modules := filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(modules, clientPackage, "package.json")); err == nil {
		return modules
	}
	require.NoError(t, os.MkdirAll(root, 0o755))
	tmp, err := os.MkdirTemp(root, key+".install-")
	require.NoError(t, err)
	defer os.RemoveAll(tmp) // nothing left after the rename
	for name, b := range files {
		require.NoError(t, os.WriteFile(filepath.Join(tmp, name), b, 0o644))
	}
	ctx, cancel := context.WithTimeout(t.Context(), npmTimeout)
	defer cancel()
	npm, _ := exec.LookPath("npm")
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = tmp
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("npm ci in %s: %v; want success\n%s", tmp, err, out)
	}
	t.Logf("npm ci: installed %s in %v into %s", clientPackage, time.Since(start).Round(time.Millisecond), dir)
	if err := os.Rename(tmp, dir); err != nil {
		// Another run may have installed the same lock file meanwhile.
		if _, statErr := os.Stat(modules); statErr != nil {
			t.Fatalf("installing into %s: %v", dir, errors.Join(err, statErr))
		}
	}
	return modules
}

// drain consumes topic as group "drain", up to n messages every period
// with auto-commit, so that the broker's backlog throttle opens again. It
// dials in plaintext unless opts say otherwise (a TLS broker). It stops
// when the test ends; the function it returns tells how many messages it
// consumed so far.
func drain(t *testing.T, addr, topic string, n int32, period time.Duration, opts ...grpc.DialOption) func() int {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	require.NoError(t, err)
	c := rocketryv1.NewConsumerServiceClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		got int
	)
	wg.Go(func() {
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			r, err := c.ReceiveMessages(ctx, &rocketryv1.ReceiveMessagesRequest{Topic: topic, Group: "drain", MaxMessages: n, AutoCommit: true})
			if err == nil {
				mu.Lock()
				got += len(r.GetMessages())
				mu.Unlock()
			}
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		conn.Close()
	})
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return got
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

func formatCounts(m map[int]int) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%d: %d, ", k, m[k])
	}
	return strings.TrimSuffix(b.String(), ", ")
}

func formatStrCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var b strings.Builder
	for _, k := range sortedKeys(m) {
		fmt.Fprintf(&b, "%s: %d, ", k, m[k])
	}
	return strings.TrimSuffix(b.String(), ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// programFailure is what every client program's JSON summary says of a
// failure.
type programFailure struct {
	Error        json.RawMessage `json:"error"`
	StartupError json.RawMessage `json:"startupError"`
}

// runProgram runs argv (node with one of node/'s scripts, or a built Go
// client program) in a temporary directory within timeout, with env added
// to the environment, and decodes its stdout, one JSON summary, into s. It
// returns stderr (the client's log). It fails the test unless the program
// exits 0 with a summary, naming it as name.
func runProgram(t *testing.T, name string, timeout time.Duration, argv, env []string, s any) string {
	t.Helper()
	stderr, err := runProgramErr(t, name, timeout, argv, env, s)
	if err != nil {
		t.Fatal(err)
	}
	return stderr
}

// runProgramErr is runProgram with its failure returned, not reported.
func runProgramErr(t *testing.T, name string, timeout time.Duration, argv, env []string, s any) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Dir = t.TempDir()
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	args := strings.Join(argv[1:], " ")
	if err := json.Unmarshal(stdout.Bytes(), s); err != nil {
		return stderr.String(), fmt.Errorf("%s %s: %v, summary %v; want exit 0 with a JSON summary\nstdout:\n%s\nstderr:\n%s",
			name, args, runErr, err, tail(stdout.String(), 2048), tail(stderr.String(), 4096))
	}
	if runErr != nil {
		var f programFailure
		_ = json.Unmarshal(stdout.Bytes(), &f)
		return stderr.String(), fmt.Errorf("%s %s: %v, error %s (startup: %s); want exit 0\nstderr:\n%s",
			name, args, runErr, f.Error, f.StartupError, tail(stderr.String(), 4096))
	}
	return stderr.String(), nil
}

// nodeArgv is the command line that runs node/script with args, and the
// environment that finds the client in nodeModules.
func nodeArgv(t *testing.T, nodeModules, script string, args ...string) (argv, env []string) {
	t.Helper()
	node, _ := exec.LookPath("node")
	path, err := filepath.Abs(filepath.Join("node", script))
	require.NoError(t, err)
	return append([]string{node, path}, args...), []string{"NODE_PATH=" + nodeModules}
}
