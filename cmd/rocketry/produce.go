package main

import (
	"bufio"
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

func init() {
	register(command{name: "produce", summary: "send messages (stdin lines or generated) to a broker and print a summary", run: runProduce})
}

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
	jsonOut        bool
	proto          protocolFlags

	set map[string]bool // flags given on the command line
}

func produceFlags(c *produceConfig) *flag.FlagSet {
	fs := newFlagSet("produce")
	fs.StringVar(&c.addr, "addr", "", "broker address HOST:PORT, or a comma-separated list of them (required)")
	fs.StringVar(&c.topic, "topic", "", "topic to send to (required)")
	fs.StringVar(&c.tag, "tag", "", "tag of every message")
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
	fs.DurationVar(&c.timeout, "timeout", 0, "stop sending after this long (0 = no limit)")
	fs.BoolVar(&c.jsonOut, "json", false, "print the summary as one JSON object")
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
	Attempts   int64   `json:"attempts"`   // over all messages, first ones included
	Elapsed    float64 `json:"elapsed_seconds"`
	Rate       float64 `json:"rate_per_second"` // stored per second of Elapsed
	Error      string  `json:"error,omitempty"` // the first failure, if any
}

// produceRun is one run of the command: its counters and first error.
type produceRun struct {
	sent, stored, duplicates, failed, spooled, attempts atomic.Int64

	mu       sync.Mutex
	firstErr error
}

// done records the outcome of one send; it runs on the producer's
// goroutine for async sends, so it only counts.
func (r *produceRun) done(rec *producer.SendReceipt, err error) {
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
		if se.Spooled {
			r.spooled.Add(1)
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
	opts := append(c.proto.options(),
		producer.WithAttemptTimeout(c.attemptTimeout),
		producer.WithMaxInFlight(c.inFlight),
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

	ctx := context.Background()
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	run := &produceRun{}
	start := time.Now()
	inputErr := c.produce(ctx, p, run)
	closeCtx, cancel := context.WithTimeout(context.Background(), c.attemptTimeout*time.Duration(c.maxAttempts)+5*time.Second)
	defer cancel()
	if err := p.Close(closeCtx); err != nil {
		run.fail(fmt.Errorf("close: %w", err))
	}
	elapsed := time.Since(start)

	sum := produceSummary{
		Sent: run.sent.Load(), Stored: run.stored.Load(), Duplicates: run.duplicates.Load(),
		Failed: run.failed.Load(), Spooled: run.spooled.Load(), Attempts: run.attempts.Load(),
		Elapsed: elapsed.Seconds(),
	}
	if elapsed > 0 {
		sum.Rate = float64(sum.Stored) / elapsed.Seconds()
	}
	if inputErr != nil {
		sum.Error = oneLine(inputErr.Error())
	} else if run.firstErr != nil {
		sum.Error = oneLine(run.firstErr.Error())
	}
	if c.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(sum); err != nil {
			fmt.Fprintf(stderr, "rocketry produce: %v\n", err)
			return 1
		}
	} else {
		fmt.Fprintf(stdout, "sent %d, stored %d (%d duplicates), failed %d (%d spooled), attempts %d, elapsed %v, %.1f msg/s\n",
			sum.Sent, sum.Stored, sum.Duplicates, sum.Failed, sum.Spooled, sum.Attempts, elapsed.Round(time.Millisecond), sum.Rate)
	}
	if sum.Error != "" {
		fmt.Fprintf(stderr, "rocketry produce: %s\n", sum.Error)
	}
	if inputErr != nil || sum.Failed > 0 || sum.Stored != sum.Sent {
		return 1
	}
	return 0
}

// produce sends every message of the input, paced by --rate, and waits for
// the async ones to finish. It returns the error that stopped the input
// (stdin unreadable, ctx ended), if any.
func (c *produceConfig) produce(ctx context.Context, p *producer.Producer, run *produceRun) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	start := time.Now()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	n := 0
	return c.messages(func(body []byte) error {
		if c.rate > 0 && n > 0 {
			wait := time.Until(start.Add(time.Duration(float64(n) / c.rate * float64(time.Second))))
			if wait > 0 {
				if timer == nil {
					timer = time.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				select {
				case <-timer.C:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		n++
		m := &producer.Message{Topic: c.topic, Tag: c.tag, Body: body}
		if !c.async {
			run.sent.Add(1)
			r, err := p.Send(ctx, m)
			run.done(r, err)
			return nil
		}
		wg.Add(1)
		err := p.SendAsync(ctx, m, func(r *producer.SendReceipt, err error) {
			run.done(r, err)
			wg.Done()
		})
		if err != nil { // refused: the callback never runs
			wg.Done()
			return fmt.Errorf("send refused: %w", err)
		}
		run.sent.Add(1)
		return nil
	})
}

// messages calls send with the body of each message: --count generated
// ones, or one per stdin line. It stops at the first error send returns.
func (c *produceConfig) messages(send func(body []byte) error) error {
	if c.count > 0 {
		body := make([]byte, c.size) // shared: the producer never changes a body
		for i := range body {
			body[i] = "rocketry"[i%len("rocketry")]
		}
		for range c.count {
			if err := send(body); err != nil {
				return err
			}
		}
		return nil
	}
	sc := bufio.NewScanner(produceStdin)
	sc.Buffer(make([]byte, 0, 64<<10), producer.DefaultMaxBodyBytes+1)
	for sc.Scan() {
		if err := send([]byte(sc.Text())); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	return nil
}
