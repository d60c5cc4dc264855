package interop_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/producer"
)

// flowBenchEnv gates TestFlowControlBench (about 75 s):
// ROCKETRY_FLOWBENCH=1 runs it; ROCKETRY_FLOWBENCH_MESSAGES=N sends N
// messages per contender instead of 2,000. BENCHMARKS.md ("RocketMQ 5
// under the broker's send-queue flow control") reports it.
const (
	flowBenchEnv         = "ROCKETRY_FLOWBENCH"
	flowBenchMessagesEnv = "ROCKETRY_FLOWBENCH_MESSAGES"
)

// The contenders of the flow-control bench, besides contenderRocketry and
// contenderNode.
const (
	contenderGo  = "rocketmq-clients/golang"
	baselineName = "baseline"
)

const (
	flowTopic = "flow"
	// flowRunTimeout bounds one contender's run, and the broker's build.
	flowRunTimeout = 3 * time.Minute
)

// flowScenario is the load every contender of TestFlowControlBench puts on
// a broker process of its own: Messages messages, each sent alone, from
// Concurrency senders at once, over apache.rocketmq.v2 on TLS, to a broker
// whose only flow control is its send queue (broker.SendQueue): Workers
// workers taking ServiceTime over each request, a request waiting over
// 200 ms refused 42900 [TIMEOUT_CLEAN_QUEUE]. Its nominal capacity is
// Workers/ServiceTime requests per second; the queue reaches
// capacity*200ms requests deep before it refuses, so Concurrency well
// above that is an overload whatever the client does.
type flowScenario struct {
	Workers     int
	ServiceTime time.Duration
	Messages    int
	Concurrency int
	// MaxAttempts is given to the official clients: 3, their default.
	MaxAttempts int
	// BaselineMessages are sent first, BaselineConcurrency at a time, by a
	// bare apache.rocketmq.v2 sender that never retries, to measure the
	// capacity the broker process delivers on this machine.
	BaselineMessages, BaselineConcurrency int
}

func defaultFlowScenario() flowScenario {
	return flowScenario{
		Workers:             2,
		ServiceTime:         20 * time.Millisecond,
		Messages:            2000,
		Concurrency:         64,
		MaxAttempts:         3,
		BaselineMessages:    500,
		BaselineConcurrency: 8,
	}
}

// nominal is the send queue's capacity, in requests (here messages) per
// second.
func (s flowScenario) nominal() float64 { return float64(s.Workers) / s.ServiceTime.Seconds() }

func (s flowScenario) brokerArgs() []string {
	return []string{
		"--send-workers", strconv.Itoa(s.Workers),
		"--send-service-time", s.ServiceTime.String(),
		"--topics", flowTopic,
	}
}

func (s flowScenario) String() string {
	return fmt.Sprintf("broker send queue %d workers x %v (nominal %.0f msg/s, refused after 200 ms in the queue); %d messages, each sent alone, %d senders at once; official clients' max attempts %d",
		s.Workers, s.ServiceTime, s.nominal(), s.Messages, s.Concurrency, s.MaxAttempts)
}

// flowRow is one contender's figures. Stored, Copies and Requests are the
// broker's (GetStats); the rest is what the contender told its caller.
type flowRow struct {
	Contender string
	Skipped   string // why it did not run; "" when it did
	Elapsed   time.Duration
	Sent      int
	Failed    int
	FailedBy  map[string]int
	Latencies []time.Duration // every send, sent or failed
	Stored    int64           // distinct messages of the topic stored
	Copies    int64           // stored again after a first copy
	Requests  int64           // SendMessage calls the broker answered
	Refused   map[string]int64
	// AttemptsBy counts the SendMessage calls the client recorded, by
	// outcome (the official clients' programs record them; rocketry's
	// are the broker's counts).
	AttemptsBy map[string]int
}

func (r flowRow) storedPerSecond() float64 { return float64(r.Stored) / r.Elapsed.Seconds() }

func (r flowRow) attemptsPerStored() float64 { return float64(r.Requests) / float64(r.Stored) }

// TestFlowControlBench runs rocketry's RocketMQ 5 producer (its defaults),
// the official Go client and the official Node.js client in turn through
// defaultFlowScenario, each against a fresh `rocketry broker` process, and
// logs a markdown table: messages stored per second against the capacity a
// bare sender measured first (baseline), the broker's SendMessage calls
// per stored message, sends failed, and the 99th percentile of the time a
// send took (sent or failed). rocketry runs in the test's process, the
// official clients in processes of their own; each contender's clock
// starts after its client started. Gated by ROCKETRY_FLOWBENCH=1.
func TestFlowControlBench(t *testing.T) {
	if os.Getenv(flowBenchEnv) != "1" {
		t.Skipf("set %s=1 to run the flow-control bench (about 75 s)", flowBenchEnv)
	}
	sc := defaultFlowScenario()
	if v := os.Getenv(flowBenchMessagesEnv); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, flowBenchMessagesEnv)
		require.Positive(t, n, flowBenchMessagesEnv)
		sc.Messages = n
	}
	t.Logf("scenario: %s", sc)
	t.Logf("load average at start: %s", loadAverage())
	bin := buildRocketry(t)
	tlsDir := t.TempDir()
	certFile, keyFile, pool := writeSelfSigned(t, tlsDir)
	tlsCfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}

	brokerArgs := append([]string{"--cert", certFile, "--key", keyFile}, sc.brokerArgs()...)
	var rows []flowRow
	run := func(name string, send func(addr string) flowRow) {
		bp := startBrokerProcess(t, bin, brokerArgs...)
		row := send(bp.addr)
		row.Contender = name
		if row.Skipped == "" {
			readStats(t, bp.addr, tlsCfg, &row)
		}
		bp.stop(t)
		t.Logf("%s: %s", name, row.details())
		rows = append(rows, row)
	}
	run(baselineName, func(addr string) flowRow { return sendBare(t, sc, addr, tlsCfg) })
	run(contenderRocketry, func(addr string) flowRow { return sendRocketryFlow(t, sc, addr, tlsCfg) })
	run(contenderGo, func(addr string) flowRow { return sendGoFlow(t, sc, addr) })
	run(contenderNode, func(addr string) flowRow { return sendNodeFlow(t, sc, addr, certFile) })
	t.Logf("load average at end: %s", loadAverage())
	t.Logf("scenario: %s\n%s", sc, flowTable(sc, rows))
	// The table is the measure; what must hold of rocketry whatever the
	// machine: it ran, accounted for every message, and lost none it
	// reported sent.
	for _, row := range rows {
		if row.Contender != contenderRocketry {
			continue
		}
		require.Empty(t, row.Skipped, "rocketry was skipped")
		assert.Equal(t, sc.Messages, row.Sent+row.Failed, "rocketry: messages sent or failed")
		assert.GreaterOrEqual(t, row.Stored, int64(row.Sent), "rocketry: stored at least every message reported sent")
	}
}

// flowTable is the markdown table of rows; the first is the baseline.
func flowTable(sc flowScenario, rows []flowRow) string {
	base := rows[0].storedPerSecond()
	var b strings.Builder
	fmt.Fprintf(&b, "| contender | stored/s | %% of capacity (%.0f/s measured, %.0f/s nominal) | attempts/stored | failed | p99 |\n", base, sc.nominal())
	b.WriteString("|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		if r.Skipped != "" {
			fmt.Fprintf(&b, "| %s | did not run: %s | | | | |\n", r.Contender, r.Skipped)
			continue
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.0f%% | %.2f | %d of %d | %s |\n",
			r.Contender, r.storedPerSecond(), 100*r.storedPerSecond()/base, r.attemptsPerStored(),
			r.Failed, r.Sent+r.Failed, percentile(r.Latencies, 0.99))
	}
	return b.String()
}

func (r flowRow) details() string {
	if r.Skipped != "" {
		return "did not run: " + r.Skipped
	}
	attempts := ""
	if r.AttemptsBy != nil {
		attempts = "; the client's attempts: " + formatStrCounts(r.AttemptsBy)
	}
	return fmt.Sprintf("sent %d, failed %d (%s) in %v%s; broker: %d stored (%d more than reported sent; %d copies more), %d SendMessage calls, refused %s; send time p50 %s, p90 %s, p99 %s, max %s",
		r.Sent, r.Failed, formatStrCounts(r.FailedBy), r.Elapsed.Round(time.Millisecond), attempts,
		r.Stored, r.Stored-int64(r.Sent), r.Copies, r.Requests, formatRefused(r.Refused),
		percentile(r.Latencies, 0.5), percentile(r.Latencies, 0.9), percentile(r.Latencies, 0.99), percentile(r.Latencies, 1))
}

func formatRefused(m map[string]int64) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		if m[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// percentile is the q-quantile of d (nearest rank), rounded for a table.
func percentile(d []time.Duration, q float64) string {
	if len(d) == 0 {
		return "-"
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	i = min(max(i, 0), len(s)-1)
	v := s[i]
	if v >= 10*time.Millisecond {
		return v.Round(time.Millisecond).String()
	}
	return v.Round(100 * time.Microsecond).String()
}

// sendBare sends the baseline: sc.BaselineMessages single-message
// SendMessage calls, sc.BaselineConcurrency at a time, with no client
// library and no retry, so that the queue is never empty and never
// refuses.
func sendBare(t *testing.T, sc flowScenario, addr string, tlsCfg *tls.Config) flowRow {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	require.NoError(t, err)
	defer cc.Close()
	c := rocketmqv2.NewMessagingServiceClient(cc)
	topic := &rocketmqv2.Resource{Name: flowTopic}
	tag := "interop"
	lat := make([]time.Duration, sc.BaselineMessages)
	codes := make([]string, sc.BaselineMessages)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range sc.BaselineConcurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= sc.BaselineMessages {
					return
				}
				begin := time.Now()
				resp, err := c.SendMessage(t.Context(), &rocketmqv2.SendMessageRequest{Messages: []*rocketmqv2.Message{{
					Topic: topic,
					SystemProperties: &rocketmqv2.SystemProperties{
						MessageId:    fmt.Sprintf("baseline-%d", i),
						Tag:          &tag,
						Keys:         []string{"interop-" + strconv.Itoa(i)},
						MessageType:  rocketmqv2.MessageType_NORMAL,
						BodyEncoding: rocketmqv2.Encoding_IDENTITY,
					},
					Body: []byte(`{"index":` + strconv.Itoa(i) + `}`),
				}}})
				lat[i] = time.Since(begin)
				switch {
				case err != nil:
					codes[i] = "grpc: " + err.Error()
				case resp.GetStatus().GetCode() != rocketmqv2.Code_OK:
					codes[i] = fmt.Sprintf("%d %s", resp.GetStatus().GetCode(), resp.GetStatus().GetMessage())
				}
			}
		})
	}
	wg.Wait()
	row := flowRow{Elapsed: time.Since(start), Latencies: lat, FailedBy: map[string]int{}}
	for _, c := range codes {
		if c == "" {
			row.Sent++
			continue
		}
		row.Failed++
		row.FailedBy[firstWords(c)]++
	}
	return row
}

// sendRocketryFlow sends sc.Messages with rocketry's producer over
// apache.rocketmq.v2, its defaults otherwise (TLS trusting the test's
// certificate), from sc.Concurrency goroutines calling Send.
func sendRocketryFlow(t *testing.T, sc flowScenario, addr string, tlsCfg *tls.Config) flowRow {
	t.Helper()
	p, err := producer.New(addr, producer.WithProtocol(producer.RocketMQ5), producer.WithTLS(tlsCfg))
	require.NoError(t, err)
	lat := make([]time.Duration, sc.Messages)
	errs := make([]error, sc.Messages)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range sc.Concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= sc.Messages {
					return
				}
				m := &producer.Message{
					Topic: flowTopic,
					Tag:   "interop",
					Keys:  []string{"interop-" + strconv.Itoa(i)},
					Body:  []byte(`{"index":` + strconv.Itoa(i) + `}`),
				}
				begin := time.Now()
				_, errs[i] = p.Send(t.Context(), m)
				lat[i] = time.Since(begin)
			}
		})
	}
	wg.Wait()
	row := flowRow{Elapsed: time.Since(start), Latencies: lat, FailedBy: map[string]int{}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Errorf("%s: Close = %v; want nil", contenderRocketry, err)
	}
	for _, err := range errs {
		if err == nil {
			row.Sent++
			continue
		}
		row.Failed++
		row.FailedBy[rocketryFailure(err)]++
	}
	return row
}

// sendGoFlow runs goclient/cmd/produce.
func sendGoFlow(t *testing.T, sc flowScenario, addr string) flowRow {
	t.Helper()
	prog := buildGoProduce(t)
	return runFlowProgram(t, contenderGo, prog, sc.clientArgs(addr), nil)
}

// sendNodeFlow runs node/produce.js over TLS, trusting the test's
// certificate through grpc-js's GRPC_DEFAULT_SSL_ROOTS_FILE_PATH (it does
// not read Node's NODE_EXTRA_CA_CERTS). The row says why when node or
// npm is missing.
func sendNodeFlow(t *testing.T, sc flowScenario, addr, certFile string) flowRow {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			return flowRow{Skipped: fmt.Sprintf("%s is not on PATH", tool)}
		}
	}
	nodeModules := installClient(t)
	node, _ := exec.LookPath("node")
	script, err := filepath.Abs(filepath.Join("node", "produce.js"))
	require.NoError(t, err)
	return runFlowProgram(t, contenderNode, node, append([]string{script, "--tls"}, sc.clientArgs(addr)...),
		append(os.Environ(), "NODE_PATH="+nodeModules, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH="+certFile))
}

func (s flowScenario) clientArgs(addr string) []string {
	return []string{"--endpoint", addr, "--topic", flowTopic, "--count", strconv.Itoa(s.Messages),
		"--concurrency", strconv.Itoa(s.Concurrency), "--max-attempts", strconv.Itoa(s.MaxAttempts)}
}
