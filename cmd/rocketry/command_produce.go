package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/producer"
	"github.com/rocketry-go/rocketry/producer/deadletter"
)

// The produce command's input, replaceable by tests.
var (
	produceStdin    io.Reader = os.Stdin
	stdinIsTerminal           = func() bool {
		fi, err := os.Stdin.Stat()
		return err == nil && fi.Mode()&os.ModeCharDevice != 0
	}
)

// connectionBackoff is the --throttle-policy value for the producer's
// default throttle schedule.
const connectionBackoff = "connection-backoff"

// produceConfig holds the produce command's flags.
type produceConfig struct {
	addr           string
	topic          string
	tag            string
	group          string
	deliverAfter   time.Duration
	count          int
	size           int
	rate           float64
	async          bool
	inFlight       int
	maxAttempts    int
	attemptTimeout time.Duration
	throttlePolicy string
	spool          string
	timeout        time.Duration
	grace          time.Duration
	jsonOut        bool
	quiet          bool
	proto          protocolFlags

	set map[string]bool // flags given on the command line
}

func produceFlags(c *produceConfig) *flag.FlagSet {
	fs := newFlagSet("produce")
	fs.StringVar(&c.addr, "addr", defaultAddr(), "broker address HOST:PORT, or a comma-separated list of them ($"+addrEnv+", when set, changes the default)")
	fs.StringVar(&c.topic, "topic", "", "topic to send to (required)")
	fs.StringVar(&c.tag, "tag", "", "tag of every message")
	fs.StringVar(&c.group, "group", "", "message group of every message (FIFO): stored in send order whatever the retries, one send of the group at a time")
	fs.DurationVar(&c.deliverAfter, "deliver-after", 0, "make every message a timed one, delivered to consumers this long after it is sent (at most 24h)")
	fs.IntVar(&c.count, "count", 0, "generate this many messages instead of reading lines from stdin (0 = read stdin)")
	fs.IntVar(&c.size, "size", 64, "body size in bytes of generated messages (with --count)")
	fs.Float64Var(&c.rate, "rate", 0, "messages per second to send at (0 = as fast as possible)")
	fs.BoolVar(&c.async, "async", false, "send with SendAsync instead of Send")
	fs.IntVar(&c.inFlight, "in-flight", 1024, "most async sends in flight (with --async)")
	fs.IntVar(&c.maxAttempts, "max-attempts", producer.DefaultMaxAttempts,
		"attempts per message, the first one included; with a delivery policy of N retries (--throttle-policy) the default is N+1")
	fs.DurationVar(&c.attemptTimeout, "attempt-timeout", 3*time.Second, "time limit of one attempt")
	fs.StringVar(&c.throttlePolicy, "throttle-policy", connectionBackoff,
		fmt.Sprintf("wait after throttling (530, or 42900 on RocketMQ 5): %s, a preset (%s), or a file holding an SNS delivery policy in JSON",
			connectionBackoff, strings.Join(backoff.PresetNames, ", ")))
	fs.StringVar(&c.spool, "spool", "", "dead-letter store file for messages whose attempts are spent (rocketry replay resends it, rocketry spool shows it)")
	fs.DurationVar(&c.timeout, "timeout", 0,
		"stop sending after this long: the sends in flight get --grace, the summary counts the messages never sent; exit 0 when every message sent was stored or spooled (0 = no limit)")
	fs.DurationVar(&c.grace, "grace", defaultGrace,
		"after --timeout or SIGINT/SIGTERM, how long the sends in flight get to finish before they are cancelled (and spooled with --spool)")
	fs.BoolVar(&c.jsonOut, "json", false, "print the summary as one JSON object")
	fs.BoolVar(&c.quiet, "quiet", false, "no live progress on stderr (it shows only on a terminal anyway)")
	c.proto.bind(fs)
	return fs
}

func (c *produceConfig) validate() error {
	if err := checkAddr(c.addr); err != nil {
		return err
	}
	if err := c.proto.validate(c.set); err != nil {
		return err
	}
	switch {
	case c.topic == "":
		return errors.New("--topic is required")
	case c.group != "" && strings.TrimSpace(c.group) == "":
		return fmt.Errorf("--group %q: must not be blank", c.group)
	case len(c.group) > producer.MaxMessageGroupBytes:
		return fmt.Errorf("--group: %d bytes; the most is %d", len(c.group), producer.MaxMessageGroupBytes)
	case c.deliverAfter < 0 || c.deliverAfter > producer.MaxDeliveryDelay:
		return fmt.Errorf("--deliver-after %v: must be in 0..%v", c.deliverAfter, producer.MaxDeliveryDelay)
	case c.group != "" && c.deliverAfter > 0:
		return errors.New("--group and --deliver-after: a message is FIFO or timed, not both")
	case c.count < 0:
		return fmt.Errorf("--count %d: must be >= 0 (0 = read stdin)", c.count)
	case c.size < 0 || c.size > producer.DefaultMaxBodyBytes:
		return fmt.Errorf("--size %d: must be in 0..%d", c.size, producer.DefaultMaxBodyBytes)
	case c.set["size"] && c.count == 0:
		return errors.New("--size: only with --count (stdin lines are sent as they are)")
	case math.IsNaN(c.rate) || math.IsInf(c.rate, 0) || c.rate < 0:
		return fmt.Errorf("--rate %v: must be >= 0 and finite (0 = as fast as possible)", c.rate)
	case c.inFlight < 1:
		return fmt.Errorf("--in-flight %d: must be >= 1", c.inFlight)
	case c.set["in-flight"] && !c.async:
		return errors.New("--in-flight: only with --async")
	case c.maxAttempts < 1:
		return fmt.Errorf("--max-attempts %d: must be >= 1", c.maxAttempts)
	case c.attemptTimeout <= 0:
		return fmt.Errorf("--attempt-timeout %v: must be > 0", c.attemptTimeout)
	case c.timeout < 0:
		return fmt.Errorf("--timeout %v: must be >= 0 (0 = no limit)", c.timeout)
	case c.grace < 0:
		return fmt.Errorf("--grace %v: must be >= 0", c.grace)
	case c.count == 0 && stdinIsTerminal():
		return errors.New("--count: give a count to generate messages, or pipe lines on stdin")
	}
	return nil
}

// deliveryPolicy reads --throttle-policy: nil for the producer's default,
// the connection backoff, else the preset or the policy file.
func (c *produceConfig) deliveryPolicy() (*backoff.DeliveryPolicy, error) {
	name := c.throttlePolicy
	switch {
	case name == connectionBackoff:
		return nil, nil
	case name == "":
		return nil, errors.New("--throttle-policy: must not be empty")
	}
	for _, p := range backoff.PresetNames {
		if name == p {
			policy, err := backoff.Preset(name)
			if err != nil {
				return nil, fmt.Errorf("--throttle-policy %q: %v", name, err)
			}
			return policy, nil
		}
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("--throttle-policy %q: not %s, a preset (%s), or a readable policy file: %v",
			name, connectionBackoff, strings.Join(backoff.PresetNames, ", "), err)
	}
	policy, err := backoff.ParsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("--throttle-policy %q: %s", name, oneLine(err.Error()))
	}
	return policy, nil
}

// policyNotice says what a delivery policy of policy.Retries() retries
// does to the attempts of a message (producer.WithMaxAttempts): without
// --max-attempts the policy sets them to its retries + 1; with it, the
// smaller of the two ends a throttled message's sends.
func (c *produceConfig) policyNotice(policy *backoff.DeliveryPolicy) string {
	n := int64(policy.Retries())
	s := fmt.Sprintf("throttle schedule %s: %s retries", c.throttlePolicy, fmtCount(n))
	switch max := int64(c.maxAttempts); {
	case !c.set["max-attempts"]:
		s += fmt.Sprintf(", so up to %s attempts per message (set --max-attempts to cap it)", fmtCount(n+1))
	case max-1 < n:
		unreached := "last retry is"
		if n-(max-1) > 1 {
			unreached = "last " + fmtCount(n-(max-1)) + " retries are"
		}
		s += fmt.Sprintf(", but --max-attempts %s allows %s: the policy's %s not reached", fmtCount(max), fmtCount(max-1), unreached)
	default:
		s += fmt.Sprintf(" after throttling, within --max-attempts %s (which also counts the retries after failures)", fmtCount(max))
	}
	if r := policy.MaxReceivesPerSecond(); r > 0 {
		s += fmt.Sprintf("; attempts limited to %g per second (its maxReceivesPerSecond)", r)
	}
	return s
}

// optionFlags maps the producer options the command gives to the flags
// (with their values) that set them, for newProducerError.
func (c *produceConfig) optionFlags() map[string]string {
	m := map[string]string{
		"WithMaxAttempts":    fmt.Sprintf("--max-attempts %d", c.maxAttempts),
		"WithAttemptTimeout": fmt.Sprintf("--attempt-timeout %v", c.attemptTimeout),
		"WithMaxInFlight":    fmt.Sprintf("--in-flight %d", c.inFlight),
		"WithDeliveryPolicy": "--throttle-policy " + c.throttlePolicy,
		"WithRateLimit":      "--throttle-policy " + c.throttlePolicy,
		"WithDeadLetterSink": "--spool " + c.spool,
	}
	c.proto.flagsOf(m)
	return m
}

// wireProtocol is the producer's protocol, from --protocol (validated).
func (c *produceConfig) wireProtocol() producer.Protocol {
	p, _ := parseProtocol(c.proto.protocol)
	return p
}

// produceSummary is what the produce command prints.
type produceSummary struct {
	Sent       int64   `json:"sent"`       // handed to the producer
	Stored     int64   `json:"stored"`     // stored by the broker (duplicates included)
	Duplicates int64   `json:"duplicates"` // of Stored: the broker already held the ID (rocketry.v1 only: RocketMQ 5 answers them OK)
	Failed     int64   `json:"failed"`     // not stored
	Spooled    int64   `json:"spooled"`    // of Failed: written to --spool
	Cancelled  int64   `json:"cancelled"`  // of Failed: in flight when --grace ran out after a stop
	NotSent    int64   `json:"not_sent"`   // generated messages never handed to the producer (--count; -1: stdin not read to its end)
	Skipped    int64   `json:"skipped"`    // stdin lines over the body limit, not sent
	Attempts   int64   `json:"attempts"`   // over all messages, first ones included
	Throttled  int64   `json:"throttled"`  // attempts the broker refused as throttled (530, 42900)
	Elapsed    float64 `json:"elapsed_seconds"`
	Rate       float64 `json:"rate_per_second"`   // stored per second of Elapsed
	Stopped    string  `json:"stopped,omitempty"` // why the input was not read to its end: --timeout, a signal
	Error      string  `json:"error,omitempty"`   // the first failure, if any
}

// produceRun is one run of the command: its counters and first error.
type produceRun struct {
	sent, stored, duplicates, failed, spooled, cancelled, attempts, skipped atomic.Int64
	k                                                                       *sendCounters  // for the progress display
	wg                                                                      sync.WaitGroup // async sends whose callback has not run

	mu       sync.Mutex
	firstErr error
}

// done records the outcome of one send; it runs on the producer's
// goroutine for async sends, so it only counts.
func (r *produceRun) done(start time.Time, rec *producer.SendReceipt, err error) {
	r.k.ended(start, err)
	if err == nil {
		r.stored.Add(1)
		r.attempts.Add(int64(rec.Attempts))
		if rec.Duplicate {
			r.duplicates.Add(1)
		}
		return
	}
	r.failed.Add(1)
	var se *producer.SendError
	if errors.As(err, &se) {
		r.attempts.Add(int64(se.Attempts))
		if se.DeadLettered {
			r.spooled.Add(1)
		}
		if errors.Is(se, producer.ErrClosed) {
			r.cancelled.Add(1)
			return // counted, and said in the summary
		}
	}
	r.fail(err)
}

func (r *produceRun) fail(err error) {
	r.mu.Lock()
	if r.firstErr == nil {
		r.firstErr = err
	}
	r.mu.Unlock()
}

func runProduce(args []string, stdout, stderr io.Writer) int {
	c := produceConfig{set: map[string]bool{}}
	fs := produceFlags(&c)
	if code, ok := parseFlags("produce", fs, args, stdout, stderr); !ok {
		return code
	}
	fs.Visit(func(f *flag.Flag) { c.set[f.Name] = true })
	if err := c.validate(); err != nil {
		fmt.Fprintf(stderr, "rocketry produce: %v\n", err)
		return 2
	}
	policy, err := c.deliveryPolicy()
	if err != nil {
		fmt.Fprintf(stderr, "rocketry produce: %v\n", err)
		return 2
	}
	run := &produceRun{k: newSendCounters(0)}
	opts, err := c.proto.options()
	if err != nil {
		fmt.Fprintf(stderr, "rocketry produce: %v\n", err)
		return 2
	}
	opts = append(opts,
		producer.WithAttemptTimeout(c.attemptTimeout),
		producer.WithMaxInFlight(c.inFlight),
		producer.WithObserver(run.k.observe),
	)
	// A policy of N retries sets the attempts to N+1 unless --max-attempts
	// is given.
	if policy == nil || c.set["max-attempts"] {
		opts = append(opts, producer.WithMaxAttempts(c.maxAttempts))
	}
	if policy != nil {
		opts = append(opts, producer.WithDeliveryPolicy(policy))
	}
	if c.spool != "" {
		store, err := deadletter.Open(c.spool)
		if err != nil {
			fmt.Fprintf(stderr, "rocketry produce: --spool %s: %s\n", c.spool, oneLine(err.Error()))
			return 2
		}
		defer store.Close() // after p.Close, below: every Put has returned
		opts = append(opts, producer.WithDeadLetterSink(store))
	}
	p, err := producer.New(c.addr, opts...)
	if err != nil {
		msg, code := newProducerError(err, c.optionFlags(), c.addr, c.wireProtocol())
		fmt.Fprintf(stderr, "rocketry produce: %s\n", msg)
		return code
	}
	if policy != nil {
		fmt.Fprintf(stderr, "rocketry produce: %s\n", c.policyNotice(policy))
	}

	stop := watchStop("produce", c.timeout, stderr)
	defer stop.stop()
	total := int64(c.count)
	if c.count == 0 {
		total = -1
	}
	disp := startProgress(stderr, c.quiet, "producing", total, run.k.done.Load, func(elapsed time.Duration, room int) string {
		return sendStatus(run.k, total, elapsed, room)
	})
	stop.onExit(disp.finish)
	defer disp.finish()
	stop.onStop(func(why error) {
		disp.setNote(stderr, c.quiet, "rocketry produce", stoppingNote(why, c.grace, c.spool != ""))
	})

	start := time.Now()
	inputDone := make(chan struct{})
	closed := stop.closeWhen(p, inputDone, c.grace)
	inputErr := c.produce(stop.ctx, p, run, stderr)
	close(inputDone)
	if err := closed(); err != nil && run.cancelled.Load() == 0 {
		run.fail(fmt.Errorf("close: %w", err))
	}
	run.wg.Wait() // the callbacks of the async sends
	disp.finish()
	elapsed := time.Since(start)

	sum := produceSummary{
		Sent: run.sent.Load(), Stored: run.stored.Load(), Duplicates: run.duplicates.Load(),
		Failed: run.failed.Load(), Spooled: run.spooled.Load(), Cancelled: run.cancelled.Load(),
		Skipped: run.skipped.Load(), Attempts: run.attempts.Load(), Elapsed: elapsed.Seconds(),
	}
	for _, n := range run.k.throttledByReason() {
		sum.Throttled += n
	}
	if elapsed > 0 {
		sum.Rate = float64(sum.Stored) / elapsed.Seconds()
	}
	if why := stop.why(); why != nil && !errors.Is(inputErr, errInputEnded) {
		sum.Stopped = why.Error()
		sum.NotSent = -1
		if c.count > 0 {
			sum.NotSent = int64(c.count) - sum.Sent - sum.Skipped
		}
	}
	if inputErr != nil && !errors.Is(inputErr, errInputEnded) && !errors.Is(inputErr, context.Canceled) {
		sum.Error = cleanError(inputErr)
	} else if run.firstErr != nil {
		sum.Error = cleanError(run.firstErr)
	}
	if c.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(sum); err != nil {
			fmt.Fprintf(stderr, "rocketry produce: %v\n", err)
			return 1
		}
	} else {
		sum.writeText(stdout, elapsed, c.grace)
	}
	if sum.Error != "" {
		fmt.Fprintf(stderr, "rocketry produce: %s\n", sum.Error)
	}
	why := stop.why()
	if stop.interrupted() {
		why = errInterrupted
	}
	return sum.exitCode(why, inputErr)
}

// exitCode is produce's exit status: 130 after a signal; 1 when a message
// was neither stored nor spooled, when the input failed or had lines over
// the limit, or, on a run not stopped by --timeout, when any send failed
// (spooled or not); else 0. A run stopped by --timeout succeeds when every
// message sent was stored or spooled.
func (s *produceSummary) exitCode(why, inputErr error) int {
	switch {
	case errors.Is(why, errInterrupted):
		return exitInterrupted
	case s.Skipped > 0 || s.Failed > s.Spooled:
		return 1
	case inputErr != nil && !errors.Is(inputErr, errInputEnded) && !errors.Is(inputErr, context.Canceled):
		return 1
	case errors.Is(why, errTimedOut):
		return 0
	case s.Failed > 0 || s.Error != "":
		return 1
	}
	return 0
}

// writeText prints the summary as one line, and the stop as a second.
func (s *produceSummary) writeText(w io.Writer, elapsed, grace time.Duration) {
	fmt.Fprintf(w, "sent %s, stored %s (%s), failed %s (%s spooled), %s (%s throttled), elapsed %v, %.1f msg/s\n",
		fmtCount(s.Sent), fmtCount(s.Stored), plural(s.Duplicates, "duplicate", "duplicates"), fmtCount(s.Failed), fmtCount(s.Spooled),
		plural(s.Attempts, "attempt", "attempts"), fmtCount(s.Throttled), elapsed.Round(time.Millisecond), s.Rate)
	if s.Skipped > 0 {
		fmt.Fprintf(w, "skipped %s over the %s-byte body limit, not sent\n",
			plural(s.Skipped, "stdin line", "stdin lines"), fmtCount(producer.DefaultMaxBodyBytes))
	}
	if s.Stopped == "" {
		return
	}
	never := "the rest of stdin was not read"
	if s.NotSent >= 0 {
		never = plural(s.NotSent, "message", "messages") + " never sent"
	}
	cancelled := ""
	if s.Cancelled > 0 {
		cancelled = fmt.Sprintf("; %s in flight cancelled after --grace %v (%s spooled)",
			fmtCount(s.Cancelled), grace, fmtCount(min(s.Cancelled, s.Spooled)))
	}
	fmt.Fprintf(w, "stopped (%s): %s%s\n", s.Stopped, never, cancelled)
}
