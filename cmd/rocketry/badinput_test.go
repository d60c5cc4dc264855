package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestBadInput is the command line's bad-input table (issue 7): every
// invalid flag, value, policy or argument of every command exits 2 with
// one line on stderr that names what is wrong, without a panic and without
// a network call. Commands that talk to a broker are pointed at a
// 127.0.0.1 port where nothing listens, so a call would fail (exit 1) or
// hang instead; `broker` is given such a port to listen on, so starting
// would hang instead.
func TestBadInput(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	dead := deadAddress(t)
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notJSON := file("not-json.json", "{healthyRetryPolicy: 3")
	negRetries := file("neg.json", `{"healthyRetryPolicy":{"numRetries":-1,"minDelayTarget":1,"maxDelayTarget":2}}`)
	badFunc := file("func.json", `{"healthyRetryPolicy":{"numRetries":3,"minDelayTarget":1,"maxDelayTarget":2,"backoffFunction":"cubic"}}`)
	minOverMax := file("minmax.json", `{"healthyRetryPolicy":{"numRetries":3,"minDelayTarget":9,"maxDelayTarget":2}}`)
	notSpool := file("not.spool", "this is not a spool")
	missing := filepath.Join(dir, "missing", "file")

	tests := []struct {
		args []string
		want string // what the stderr line must name
	}{
		// The command itself.
		{[]string{"nope"}, `"nope"`},
		{[]string{"--version"}, `"--version"`},

		// produce
		{[]string{"produce", "--addr", "", "--topic", "t", "--count", "1"}, "--addr"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--grace", "-1s"}, "--grace"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--ca", "/no/such/ca.pem"}, "--ca"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--tls=false", "--insecure-skip-verify"}, "--tls=false"},
		{[]string{"produce", "--addr", dead, "--count", "1"}, "--topic"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "-1"}, "--count"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--size", "-1"}, "--size"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--size", "99999999"}, "--size"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--rate", "-1"}, "--rate"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--rate", "NaN"}, "--rate"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--rate", "+Inf"}, "--rate"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--async", "--in-flight", "0"}, "--in-flight"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--in-flight", "8"}, "--in-flight"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--max-attempts", "0"}, "--max-attempts"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--attempt-timeout", "0s"}, "--attempt-timeout"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--attempt-timeout", "soon"}, "-attempt-timeout"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--timeout", "-1s"}, "--timeout"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--throttle-policy", ""}, "--throttle-policy"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--throttle-policy", missing}, "--throttle-policy"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--throttle-policy", notJSON}, "--throttle-policy"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--throttle-policy", negRetries}, "--throttle-policy"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--throttle-policy", badFunc}, "--throttle-policy"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--throttle-policy", minOverMax}, "--throttle-policy"},
		{[]string{"produce", "--addr", "localhost", "--topic", "t", "--count", "1"}, "localhost"},
		{[]string{"produce", "--addr", dead + ",,", "--topic", "t", "--count", "1"}, "--addr"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--spool", missing}, "--spool"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--spool", dir}, "--spool"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--spool", notSpool}, "--spool"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--bogus"}, "-bogus"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "extra"}, `"extra"`},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--protocol", "amqp"}, "--protocol"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--protocol", "rocketry", "--namespace", "ns"}, "--namespace"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--protocol", "rocketmq", "--namespace", "n s"}, "--namespace"},
		{[]string{"produce", "--addr", dead, "--topic", "t", "--count", "1", "--protocol", "rocketmq", "--access-key", ""}, "--access-key"},

		// replay
		{[]string{"replay", "--addr", dead}, "--spool"},
		{[]string{"replay", "--spool", notSpool, "--addr", ""}, "--addr"},
		{[]string{"replay", "--spool", notSpool, "--addr", dead, "--grace", "-1s"}, "--grace"},
		{[]string{"replay", "--spool", notSpool, "--addr", dead, "--max-attempts", "0"}, "--max-attempts"},
		{[]string{"replay", "--spool", notSpool, "--addr", dead, "--attempt-timeout", "-1s"}, "--attempt-timeout"},
		{[]string{"replay", "--spool", notSpool, "--addr", dead, "--timeout", "-1s"}, "--timeout"},
		{[]string{"replay", "--spool", notSpool, "--addr", "nohost"}, "nohost"},
		{[]string{"replay", "--spool", notSpool, "--addr", dead, "x"}, `"x"`},
		{[]string{"replay", "--spool", notSpool, "--addr", dead, "--protocol", "amqp"}, "--protocol"},
		{[]string{"replay", "--spool", notSpool, "--addr", dead, "--access-key", "ak"}, "--access-key"},

		// consume
		{[]string{"consume", "--addr", dead}, "--topic"},
		{[]string{"consume", "--addr", dead, "--topic", "t", "--group", ""}, "--group"},
		{[]string{"consume", "--addr", dead, "--topic", "t", "--rate", "-1"}, "--rate"},
		{[]string{"consume", "--addr", dead, "--topic", "t", "--rate", "Inf"}, "--rate"},
		{[]string{"consume", "--addr", dead, "--topic", "t", "--reset-offset", "-2"}, "--reset-offset"},
		{[]string{"consume", "--addr", dead, "--topic", "t", "--count", "-1"}, "--count"},
		{[]string{"consume", "--addr", dead, "--topic", "t", "--duration", "-1s"}, "--duration"},
		{[]string{"consume", "--addr", dead, "--topic", "t", "--batch", "0"}, "--batch"},
		{[]string{"consume", "--addr", dead, "--topic", "t", "--batch", "10001"}, "--batch"},
		{[]string{"consume", "--addr", dead, "--topic", "t", "--poll", "0s"}, "--poll"},
		{[]string{"consume", "--addr", dead, "--topic", "t", "--batch", "many"}, "-batch"},

		// stats
		{[]string{"stats", "--addr", dead, "--timeout", "0s"}, "--timeout"},
		{[]string{"stats", "--addr", dead, "--timeout", "-1s"}, "--timeout"},
		{[]string{"stats", "--addr", dead, "--json=maybe"}, "-json"},
		{[]string{"stats", "--addr", dead, "now"}, `"now"`},

		// broker: it would listen on dead if it started.
		{[]string{"broker", "--listen", dead, "--queues", "0"}, "WithQueues(0)"},
		{[]string{"broker", "--listen", dead, "--queues", "5000"}, "WithQueues(5000)"},
		{[]string{"broker", "--listen", dead, "--max-backlog", "-1"}, "MaxBacklog"},
		{[]string{"broker", "--listen", dead, "--max-backlog", "5", "--backlog-low-water", "10"}, "BacklogLowWater"},
		{[]string{"broker", "--listen", dead, "--max-storage-load", "-1"}, "MaxStorageLoad"},
		{[]string{"broker", "--listen", dead, "--max-send-rate", "NaN"}, "MaxSendRate"},
		{[]string{"broker", "--listen", dead, "--internal-rate", "2"}, "InternalRate"},
		{[]string{"broker", "--listen", dead, "--blackhole-rate", "-0.5"}, "BlackholeRate"},
		{[]string{"broker", "--listen", dead, "--internal-rate", "0.6", "--drop-rate", "0.6"}, "above 1"},
		{[]string{"broker", "--listen", dead, "--stored-internal-rate", "1.5"}, "StoredInternalRate"},
		{[]string{"broker", "--listen", dead, "--internal-rate", "0.6", "--stored-internal-rate", "0.6"}, "above 1"},
		{[]string{"broker", "--listen", dead, "--latency", "-1s"}, "Latency"},
		{[]string{"broker", "--listen", dead, "--max-body-bytes", "0"}, "WithMaxBodyBytes(0)"},
		{[]string{"broker", "--listen", dead, "--max-batch", "0"}, "WithMaxBatch(0)"},
		{[]string{"broker", "--listen", dead, "--dedup-count", "0"}, "WithDedupWindow"},
		{[]string{"broker", "--listen", dead, "--dedup-ttl", "-1s"}, "WithDedupWindow"},
		{[]string{"broker", "--listen", dead, "--topics", "a b"}, `"a b"`},
		{[]string{"broker", "--listen", dead, "--log-level", "loud"}, "--log-level"},
		{[]string{"broker", "--listen", dead, "--stats-interval", "-1s"}, "--stats-interval"},
		{[]string{"broker", "--listen", dead, "--seed", "x"}, "-seed"},
		{[]string{"broker", "--listen", dead, "now"}, `"now"`},
		{[]string{"broker", "--listen", dead, "--peers", "broker-1"}, "--peers"},
		{[]string{"broker", "--listen", dead, "--peers", "broker-1=nohost"}, "--peers"},
		{[]string{"broker", "--listen", dead, "--name", ""}, "--name"},
		{[]string{"broker", "--listen", dead, "--tx-check-interval", "0s"}, "--tx-check-interval"},
		{[]string{"broker", "--listen", dead, "--tx-check-max", "0"}, "--tx-check-max"},

		// schedule
		{[]string{"schedule", "--retries", "5"}, "give exactly one of"},
		{[]string{"schedule", "--connection-backoff", "--preset", "aws-managed"}, "give exactly one of"},
		{[]string{"schedule", "--connection-backoff", "--retries", "-1"}, "--retries"},
		{[]string{"schedule", "--preset", "nope"}, "--preset"},
		{[]string{"schedule", "--policy", missing}, "--policy"},
		{[]string{"schedule", "--policy", notJSON}, "want valid JSON"},
		{[]string{"schedule", "--policy", negRetries}, "numRetries = -1"},
		{[]string{"schedule", "--policy", badFunc}, `backoffFunction = "cubic"`},
		{[]string{"schedule", "--policy", minOverMax}, "minDelayTarget = 9"},
		{[]string{"schedule", "--seed", "-1"}, "-seed"},

		// demo (runs its broker in process; bad flags stop it before)
		{[]string{"demo", "--messages", "0"}, "--messages"},
		{[]string{"demo", "--body-bytes", "-1"}, "--body-bytes"},
		{[]string{"demo", "--sync-workers", "0"}, "--sync-workers"},
		{[]string{"demo", "--async-share", "1.5"}, "--async-share"},
		{[]string{"demo", "--max-in-flight", "0"}, "--max-in-flight"},
		{[]string{"demo", "--max-attempts", "0"}, "--max-attempts"},
		{[]string{"demo", "--attempt-timeout", "0s"}, "--attempt-timeout"},
		{[]string{"demo", "--failure-backoff", "later"}, "--failure-backoff"},
		{[]string{"demo", "--queues", "0"}, "--queues"},
		{[]string{"demo", "--max-backlog", "-1"}, "--max-backlog"},
		{[]string{"demo", "--internal-rate", "1"}, "--internal-rate"},
		{[]string{"demo", "--time-scale", "0"}, "--time-scale"},
		{[]string{"demo", "--timeout", "-1s"}, "--timeout"},
		{[]string{"demo", "--grace", "-1s"}, "--grace"},
		{[]string{"demo", "--restart-at", "2"}, "--restart-at"},
		{[]string{"demo", "--protocol", "grpc"}, "--protocol"},
		// a RocketMQ 5 client takes host:port access points, not a target
		// with a scheme (a rocketry.v1 producer resolves one)
		{[]string{"produce", "--protocol", "rocketmq", "--addr", "dns:///localhost:7777", "--topic", "t", "--count", "1"}, "not a target with a scheme"},
	}
	for _, tt := range tests {
		if _, ok := lookup(tt.args[0]); !ok && tt.args[0] != "nope" && !strings.HasPrefix(tt.args[0], "-") {
			t.Errorf("command %q is not registered", tt.args[0])
			continue
		}
		checkRefused(t, tt.args, 2, tt.want)
	}
	// The spool is read when replay runs: a missing or foreign file is a
	// failure of the run, exit 1 (as command_replay_test.go pins), still found
	// before any call.
	checkRefused(t, []string{"replay", "--spool", missing, "--addr", dead}, 1, "no such file")
	checkRefused(t, []string{"replay", "--spool", notSpool, "--addr", dead}, 1, "not a dead-letter store")
}

// checkRefused runs args and checks that the command returned at once with
// exit code want, one line on stderr naming what, and (for exit 2) nothing
// on stdout.
func checkRefused(t *testing.T, args []string, want int, what string) {
	t.Helper()
	name := strings.Join(args, " ")
	code, stdout, stderr, panicked := runBounded(args, 10*time.Second)
	switch {
	case panicked != "":
		t.Errorf("rocketry %s panicked: %s", name, panicked)
	case code == -1:
		t.Errorf("rocketry %s did not return within 10s (it should refuse at once)", name)
	case code != want:
		t.Errorf("rocketry %s = exit %d, stderr %q; want exit %d", name, code, stderr, want)
	case strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") || !strings.HasPrefix(stderr, "rocketry"):
		t.Errorf("rocketry %s: stderr %q; want one line starting with \"rocketry\"", name, stderr)
	case !strings.Contains(stderr, what):
		t.Errorf("rocketry %s: stderr %q; want it to name %q", name, stderr, what)
	case stdout != "" && code == 2:
		t.Errorf("rocketry %s: stdout %q; want nothing", name, stdout)
	}
}

// deadAddress is a 127.0.0.1 address where nothing listens.
func deadAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// runBounded runs the command line args; code is -1 when it did not
// return within d.
func runBounded(args []string, d time.Duration) (code int, stdout, stderr string, panicked string) {
	var out, errOut syncBuffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				panicked = strings.TrimSpace(strings.SplitN(strings.TrimSpace(toString(r)), "\n", 2)[0])
			}
		}()
		code = run(args, &out, &errOut)
	}()
	select {
	case <-done:
		return code, out.String(), errOut.String(), panicked
	case <-time.After(d):
		return -1, out.String(), errOut.String(), ""
	}
}

func toString(r any) string {
	if err, ok := r.(error); ok {
		return err.Error()
	}
	if s, ok := r.(string); ok {
		return s
	}
	return "non-string panic"
}
