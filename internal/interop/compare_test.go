package interop_test

import (
	"context"
	"errors"
	"fmt"
	"os"
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
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/internal/bench"
	"github.com/rocketry-go/rocketry/producer"
)

// compareEnv gates TestCompareUnderThrottling, which takes about 12 s a
// round: ROCKETRY_COMPARE=1 runs it; ROCKETRY_COMPARE_ROUNDS=N runs it N
// times (default 1), alternating which contender goes first.
const (
	compareEnv       = "ROCKETRY_COMPARE"
	compareRoundsEnv = "ROCKETRY_COMPARE_ROUNDS"
)

// The contenders of the comparison.
const (
	contenderRocketry = "rocketry"
	contenderNode     = "rocketmq-client-nodejs"
)

const (
	compareTopic   = "compare"
	compareGroup   = "drain"
	archiveTopic   = "archive"
	archiveGroup   = "audit"
	nodeMaxAttempt = 3 // the Node client's default maxAttempts, passed as is
)

// compareScenario is the throttling scenario both contenders run, each on a
// fresh broker configured the same: Messages messages sent Concurrency at
// a time over apache.rocketmq.v2, a topic throttled for BACKLOG above
// MaxBacklog until LowWater, one consumer group draining it at DrainRate
// through the rocketry.v1 ConsumerService, injected faults and, when
// EpisodeReads > 0, a storage-load episode: EpisodeAfter the broker's
// first SendMessage of the topic, a group of the archive topic (filled
// with ArchiveMessages before the run) is reset to offset 0 and re-reads
// EpisodeReads old messages at EpisodeReadRate, above MaxStorageLoad, so
// that every send is refused STORAGE_LOAD for a while.
type compareScenario struct {
	Messages    int
	Concurrency int

	MaxBacklog, LowWater  int64
	DrainRate             float64 // messages per second
	DrainTick, DrainBurst time.Duration

	Faults broker.Faults

	ArchiveMessages int
	EpisodeAfter    time.Duration
	EpisodeReads    int
	EpisodeReadRate float64
	MaxStorageLoad  float64

	Seed int64
}

// fullCompareScenario is the scenario BENCHMARKS.md reports.
func fullCompareScenario() compareScenario {
	return compareScenario{
		Messages:        5000,
		Concurrency:     16,
		MaxBacklog:      500,
		LowWater:        400,
		DrainRate:       1000,
		DrainTick:       5 * time.Millisecond,
		DrainBurst:      25 * time.Millisecond,
		Faults:          broker.Faults{InternalRate: 0.02, DropRate: 0.01},
		ArchiveMessages: 20000,
		EpisodeAfter:    2 * time.Second,
		EpisodeReads:    8000,
		EpisodeReadRate: 8000,
		MaxStorageLoad:  5000,
		Seed:            1,
	}
}

// tinyCompareScenario is the full one shrunk to about a second per
// contender, without the storage-load episode.
func tinyCompareScenario() compareScenario {
	s := fullCompareScenario()
	s.Messages, s.Concurrency = 200, 8
	s.MaxBacklog, s.LowWater = 40, 30
	s.DrainRate = 400
	s.ArchiveMessages, s.EpisodeReads = 0, 0
	return s
}

func (s compareScenario) String() string {
	ep := "no storage-load episode"
	if s.EpisodeReads > 0 {
		ep = fmt.Sprintf("storage-load episode %v after the first send: %d of %d archived messages re-read at %.0f/s over MaxStorageLoad %.0f/s",
			s.EpisodeAfter, s.EpisodeReads, s.ArchiveMessages, s.EpisodeReadRate, s.MaxStorageLoad)
	}
	return fmt.Sprintf("%d messages, %d in flight; MaxBacklog %d, low water %d; drain %.0f msg/s (tick %v, burst %v); faults InternalRate %v, DropRate %v; %s; seed %d",
		s.Messages, s.Concurrency, s.MaxBacklog, s.LowWater, s.DrainRate, s.DrainTick, s.DrainBurst,
		s.Faults.InternalRate, s.Faults.DropRate, ep, s.Seed)
}

// sendOutcome is what a contender told its caller about one message.
type sendOutcome struct {
	ID  string
	OK  bool
	Err string // why it failed, for the log; "" when OK
	// Unknown counts the attempts at the message whose outcome the
	// contender could not know (no answer, or 50001): the broker may have
	// stored the message on each.
	Unknown int
}

// compareRow is one contender's figures in one run.
type compareRow struct {
	Contender string
	Messages  int // messages given to the contender to send
	Sent      int // reported sent to the caller
	Failed    int // reported failed to the caller
	Stored    int // distinct ids of the contender's in broker.Messages
	Attempts  int // SendMessage entries of the topic the broker saw
	// Lost: reported sent, not stored. StoredTwice: ids the broker
	// stored more than once (its faithful face does not deduplicate, as the
	// Apache proxy). FailedButStored: reported failed, yet stored.
	Lost, StoredTwice, FailedButStored int
	// Copies is the broker's own count of the messages of the topic stored
	// although their id was stored before (TopicStats.Copies); Unknown the
	// unknown outcomes the contender met, the most copies it may cause.
	Copies  int64
	Unknown int
	// Gaps between consecutive attempts at one message, at the broker.
	Gaps           []time.Duration
	GapsAfter429   []time.Duration // after a throttled attempt (42900)
	Results        map[string]int  // the broker's results, by result and reason
	FailedBy       map[string]int  // the errors reported to the caller
	Drained        int             // messages the consumer took
	Elapsed        time.Duration   // first to last SendMessage at the broker
	Unexpected     []string        // stored ids the contender never sent, ids without a message
	AttemptsPerMsg map[int]int     // messages by attempts the broker saw
}

// TestCompareUnderThrottling runs rocketry's producer over
// apache.rocketmq.v2 and the official RocketMQ Node.js client through the
// same throttling scenario (fullCompareScenario) and logs a markdown
// table of what each told its caller against what the broker stored and
// saw. Wall-clock throughput is left out on purpose: a Go producer in the
// broker's process and a Node.js process on the same CPUs are not
// comparable that way. It is gated by ROCKETRY_COMPARE=1; BENCHMARKS.md
// ("RocketMQ 5: rocketry beside the official Node.js client") reports it.
func TestCompareUnderThrottling(t *testing.T) {
	if os.Getenv(compareEnv) != "1" {
		t.Skipf("set %s=1 to run the comparison (about 12 s a round)", compareEnv)
	}
	rounds := 1
	if v := os.Getenv(compareRoundsEnv); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, compareRoundsEnv)
		require.Positive(t, n, compareRoundsEnv)
		rounds = n
	}
	nodeModules := installClient(t)
	sc := fullCompareScenario()
	t.Logf("scenario: %s", sc)
	var all []compareRow
	for r := range rounds {
		order := []string{contenderRocketry, contenderNode}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		var rows []compareRow
		for _, name := range order {
			row := runContender(t, sc, name, nodeModules)
			logDetails(t, row)
			rows = append(rows, row)
		}
		slices.SortFunc(rows, func(a, b compareRow) int { return strings.Compare(b.Contender, a.Contender) })
		t.Logf("round %d of %d (%s first):\n%s", r+1, rounds, order[0], compareTable(rows))
		all = append(all, rows...)
	}
	for _, row := range all {
		assert.Zero(t, row.Lost, "%s: messages reported sent, not stored", row.Contender)
		assert.LessOrEqual(t, row.Copies, int64(row.Unknown), "%s: copies stored against unknown outcomes", row.Contender)
		assert.Empty(t, row.Unexpected, "%s: stored messages the contender did not send", row.Contender)
	}
}

// TestCompareUnderThrottlingTiny is TestCompareUnderThrottling shrunk to
// 200 messages, run always: neither contender loses a message it reported
// sent, and the copies the broker stores (its faithful face does not
// deduplicate) are no more than the unknown outcomes each contender met.
func TestCompareUnderThrottlingTiny(t *testing.T) {
	nodeModules := installClient(t)
	sc := tinyCompareScenario()
	var rows []compareRow
	for _, name := range []string{contenderRocketry, contenderNode} {
		row := runContender(t, sc, name, nodeModules)
		assert.Equal(t, sc.Messages, row.Sent+row.Failed, "%s: messages reported sent + failed", row.Contender)
		assert.Zero(t, row.Lost, "%s: messages reported sent, not stored", row.Contender)
		assert.LessOrEqual(t, row.Copies, int64(row.Unknown), "%s: copies stored against unknown outcomes", row.Contender)
		assert.Empty(t, row.Unexpected, "%s: stored messages the contender did not send", row.Contender)
		rows = append(rows, row)
	}
	t.Logf("scenario: %s\n%s", sc, compareTable(rows))
}

// runContender runs sc against name on a fresh broker and returns its row.
func runContender(t *testing.T, sc compareScenario, name, nodeModules string) compareRow {
	t.Helper()
	withObserver, observed := observer()
	b := brokertest.Start(t, // the faithful face: a message sent again is stored again
		broker.WithSeed(sc.Seed),
		broker.WithTopics(compareTopic),
		broker.WithThrottle(broker.Throttle{MaxBacklog: sc.MaxBacklog, BacklogLowWater: sc.LowWater, MaxStorageLoad: sc.MaxStorageLoad}),
		withObserver,
	)
	cc, err := grpc.NewClient(b.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer cc.Close()
	consumer := rocketryv1.NewConsumerServiceClient(cc)
	ctx := t.Context()
	require.NoError(t, prepareCompare(ctx, sc, cc, consumer), "preparing the broker")
	// The faults come after the archive is filled, so that it is whole.
	require.NoError(t, b.SetFaults(sc.Faults))

	bg, stop := context.WithCancel(ctx)
	var (
		wg       sync.WaitGroup
		consumed atomic.Int64
		bgErr    = make(chan error, 2)
	)
	wg.Go(func() {
		if err := bench.Drain(bg, consumer, compareTopic, compareGroup, sc.DrainRate, sc.DrainBurst, sc.DrainTick, &consumed); err != nil {
			bgErr <- err
		}
	})
	wg.Go(func() {
		if err := episode(bg, sc, b, consumer); err != nil {
			bgErr <- err
		}
	})

	var outcomes []sendOutcome
	switch name {
	case contenderRocketry:
		outcomes = sendRocketry(t, sc, b.Addr())
	case contenderNode:
		outcomes = sendNode(t, sc, b.Addr(), nodeModules)
	default:
		t.Fatalf("unknown contender %q", name)
	}
	stop()
	wg.Wait()
	close(bgErr)
	for err := range bgErr {
		t.Errorf("%s: background consumer: %v", name, err)
	}
	row := tally(name, outcomes, b.Messages(compareTopic), observed())
	row.Drained = int(consumed.Load())
	row.Copies = topicCopies(b, compareTopic)
	return row
}

// sendRocketry sends sc.Messages with rocketry's producer over
// apache.rocketmq.v2, its defaults otherwise, from sc.Concurrency
// goroutines; each message is the one produce.js sends.
func sendRocketry(t *testing.T, sc compareScenario, addr string) []sendOutcome {
	t.Helper()
	out := make([]sendOutcome, sc.Messages)
	var unknownMu sync.Mutex
	unknown := map[string]int{} // unknown outcomes retried, by message id
	obs := producer.Observer(func(e producer.Event) {
		if e.Kind == producer.EventRetry && e.Why == producer.FailedUnknown {
			unknownMu.Lock()
			unknown[e.MessageID]++
			unknownMu.Unlock()
		}
	})
	p, err := producer.New(addr, producer.WithProtocol(producer.RocketMQ5), producer.WithObserver(obs))
	require.NoError(t, err)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, p.Close(ctx), "Close")
	}()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range sc.Concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= sc.Messages {
					return
				}
				m := &producer.Message{
					Topic: compareTopic,
					Tag:   "interop",
					Keys:  []string{"interop-" + strconv.Itoa(i)},
					Body:  []byte(`{"index":` + strconv.Itoa(i) + `}`),
				}
				_, err := p.Send(t.Context(), m)
				out[i] = sendOutcome{ID: m.ID, OK: err == nil}
				if err != nil {
					out[i].Err = rocketryFailure(err)
					var se *producer.SendError
					if errors.As(err, &se) && se.Last == producer.FailedUnknown {
						out[i].Unknown++ // the last attempt's, not retried
					}
				}
			}
		})
	}
	wg.Wait()
	unknownMu.Lock()
	defer unknownMu.Unlock()
	for i := range out {
		out[i].Unknown += unknown[out[i].ID]
	}
	return out
}

// rocketryFailure names a failed send by why it ended and its last code.
func rocketryFailure(err error) string {
	var se *producer.SendError
	if !errors.As(err, &se) {
		return err.Error()
	}
	why := "other"
	for _, k := range []struct {
		err  error
		name string
	}{
		{producer.ErrAttemptsExhausted, "attempts exhausted"},
		{producer.ErrNotRetryable, "not retryable"},
		{producer.ErrRetryBudget, "retry budget"},
		{producer.ErrDeadlineTooShort, "deadline too short"},
	} {
		if errors.Is(err, k.err) {
			why = k.name
			break
		}
	}
	if se.WireCode != 0 {
		return fmt.Sprintf("%s, last %d", why, se.WireCode)
	}
	return fmt.Sprintf("%s, last %v", why, se.Last)
}

// sendNode sends sc.Messages with the official Node.js client (its
// defaults: maxAttempts 3) through produce.js.
func sendNode(t *testing.T, sc compareScenario, addr, nodeModules string) []sendOutcome {
	t.Helper()
	s, stderr := runProduce(t, nodeModules,
		"--endpoint", addr, "--topic", compareTopic, "--count", strconv.Itoa(sc.Messages),
		"--concurrency", strconv.Itoa(sc.Concurrency), "--max-attempts", strconv.Itoa(nodeMaxAttempt))
	require.Len(t, s.Messages, sc.Messages, "messages in produce.js's summary")
	waits := map[string]int{}
	for _, m := range resendAfter.FindAllStringSubmatch(stderr, -1) {
		waits[m[1]+" ms"]++
	}
	t.Logf("%s: the client's stated waits before re-sending after 42900: %s; Settings it took: %d", contenderNode, formatStrCounts(waits), len(s.Settings))
	out := make([]sendOutcome, len(s.Messages))
	for i, m := range s.Messages {
		out[i] = sendOutcome{ID: m.MessageID, OK: m.OK, Unknown: m.unknownOutcomes()}
		if !m.OK && m.Error != nil {
			out[i].Err = m.Error.String()
		}
	}
	return out
}
