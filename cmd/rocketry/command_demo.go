package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/producer"
)

// The demo: an in-process broker with small throttling thresholds and a few
// faults, two consumer groups that make throttling start and lift, and a
// producer that sends through all of it and keeps every message. The run is
// in command_demo_run.go, the counting in send_counters.go (shared with
// produce and replay), the live display in command_demo_progress.go and the
// summary in command_demo_report.go.

// demoConfig is the demo's configuration, from its flags.
type demoConfig struct {
	messages     int
	bodyBytes    int
	syncWorkers  int
	asyncShare   float64
	maxInFlight  int
	maxAttempts  int
	attemptLimit time.Duration
	timeScale    float64
	failure      string // "immediate" or "backoff"
	protocol     string // protoRocketMQ or protoRocketry
	pacing       bool   // producer.WithPacing
	fifoGroups   int    // message groups among the async messages

	queues           int
	maxBacklog       int64
	coldReadDistance int64
	maxStorageLoad   float64
	internalRate     float64
	restartAt        float64
	seed             uint64

	consumeRate float64
	resetAt     float64
	rereadRate  float64

	replay  bool
	jsonOut bool
	quiet   bool
	timeout time.Duration
	grace   time.Duration
}

// demoFlags binds the demo's flags to c, which holds the defaults.
func demoFlags(c *demoConfig) *flag.FlagSet {
	fs := newFlagSet("demo")
	fs.StringVar(&c.protocol, "protocol", protoRocketMQ,
		`wire protocol of the producer: "rocketmq" (apache.rocketmq.v2, what RocketMQ 5 proxies speak and what our users run in production) `+
			`or "rocketry" (rocketry.v1, rocketry's own); the in-process broker serves both on one port`)
	fs.BoolVar(&c.pacing, "pacing", true, "pace an endpoint that throttles without a hint (producer.WithPacing; on by default, as in the producer; --pacing=false turns it off)")
	fs.IntVar(&c.messages, "messages", 20_000, "number of messages to send")
	fs.IntVar(&c.bodyBytes, "body-bytes", 64, "size of each message body in bytes")
	fs.IntVar(&c.syncWorkers, "sync-workers", 8, "goroutines sending with Send")
	fs.Float64Var(&c.asyncShare, "async-share", 0.5, "share of the messages sent with SendAsync (0..1); the rest use Send")
	fs.IntVar(&c.fifoGroups, "fifo-groups", 4, "FIFO message groups among the SendAsync messages: every 10th of them belongs to one, in turn, and the summary checks each group's stored order (0 = none)")
	fs.IntVar(&c.maxInFlight, "max-in-flight", 256, "most SendAsync sends in flight (producer.WithMaxInFlight)")
	fs.IntVar(&c.maxAttempts, "max-attempts", 30, "attempts per message, the first one included (producer.WithMaxAttempts)")
	fs.DurationVar(&c.attemptLimit, "attempt-timeout", 500*time.Millisecond, "time limit of one attempt (producer.WithAttemptTimeout)")
	fs.Float64Var(&c.timeScale, "time-scale", 0.01, "factor applied to the gRPC connection backoff (1 s, max 120 s, min connect 20 s) used after throttling; 1 = real time")
	fs.StringVar(&c.failure, "failure-backoff", "immediate", `wait after a failed attempt: "immediate" (the default schedule) or "backoff" (the scaled connection backoff)`)
	fs.IntVar(&c.queues, "queues", 4, "queues of the topic")
	fs.Int64Var(&c.maxBacklog, "max-backlog", 2_000, "backlog above which the broker throttles with BACKLOG (lifts at 80%)")
	fs.Int64Var(&c.coldReadDistance, "cold-read-distance", 200, "how far behind its queue's head a read is cold")
	fs.Float64Var(&c.maxStorageLoad, "max-storage-load", 1_000, "cold reads per second above which the broker throttles with STORAGE_LOAD")
	fs.Float64Var(&c.internalRate, "internal-rate", 0.03, "share of sends the broker answers with INTERNAL (500), storing nothing")
	fs.Float64Var(&c.restartAt, "restart-at", 0.6, "restart the broker once this share of the messages is done (0 = no restart)")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the broker's faults and the producer's jitter")
	fs.Float64Var(&c.consumeRate, "consume-rate", 2_000, `messages per second the steady consumer group ("billing") drains`)
	fs.Float64Var(&c.resetAt, "reset-at", 0.3, `reset the "audit" group to offset 0 once this share of the messages is done (0 = never)`)
	fs.Float64Var(&c.rereadRate, "reread-rate", 20_000, `messages per second the "audit" group re-reads at after its reset`)
	fs.BoolVar(&c.replay, "replay", true, "replay the dead-letter spool at the end (--replay=false to keep it to the summary)")
	fs.BoolVar(&c.jsonOut, "json", false, "print the summary as one JSON object")
	fs.BoolVar(&c.quiet, "quiet", false, "no live progress on stderr (it shows only on a terminal anyway)")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute,
		"stop sending after this long: the messages not yet handed to the producer are counted as never sent (0 = no limit)")
	fs.DurationVar(&c.grace, "grace", 2*time.Second,
		"after --timeout or SIGINT/SIGTERM, how long the sends in flight get to finish before they are cancelled and spooled (shorter than produce's: the demo's schedules are scaled)")
	return fs
}

// validate names the first flag that is out of range.
func (c *demoConfig) validate() error {
	share := func(name string, v float64) error {
		if math.IsNaN(v) || v < 0 || v > 1 {
			return fmt.Errorf("--%s %v: must be in 0..1", name, v)
		}
		return nil
	}
	positive := func(name string, v float64) error {
		if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
			return fmt.Errorf("--%s %v: must be > 0", name, v)
		}
		return nil
	}
	if _, err := parseProtocol(c.protocol); err != nil {
		return err
	}
	switch {
	case c.messages < 1:
		return fmt.Errorf("--messages %d: must be >= 1", c.messages)
	case c.bodyBytes < 0 || c.bodyBytes > 1<<20:
		return fmt.Errorf("--body-bytes %d: must be in 0..%d", c.bodyBytes, 1<<20)
	case c.syncWorkers < 1:
		return fmt.Errorf("--sync-workers %d: must be >= 1", c.syncWorkers)
	case c.fifoGroups < 0 || c.fifoGroups > 1000:
		return fmt.Errorf("--fifo-groups %d: must be in 0..1000", c.fifoGroups)
	case c.maxInFlight < 1:
		return fmt.Errorf("--max-in-flight %d: must be >= 1", c.maxInFlight)
	case c.maxAttempts < 1:
		return fmt.Errorf("--max-attempts %d: must be >= 1", c.maxAttempts)
	case c.attemptLimit <= 0:
		return fmt.Errorf("--attempt-timeout %v: must be > 0", c.attemptLimit)
	case c.failure != "immediate" && c.failure != "backoff":
		return fmt.Errorf("--failure-backoff %q: must be immediate or backoff", c.failure)
	case c.queues < 1 || c.queues > 1024:
		return fmt.Errorf("--queues %d: must be in 1..1024", c.queues)
	case c.maxBacklog < 0:
		return fmt.Errorf("--max-backlog %d: must be >= 0 (0 = off)", c.maxBacklog)
	case c.coldReadDistance < 1:
		return fmt.Errorf("--cold-read-distance %d: must be >= 1", c.coldReadDistance)
	case math.IsNaN(c.maxStorageLoad) || math.IsInf(c.maxStorageLoad, 0) || c.maxStorageLoad < 0:
		return fmt.Errorf("--max-storage-load %v: must be >= 0 (0 = off)", c.maxStorageLoad)
	case c.timeout < 0:
		return fmt.Errorf("--timeout %v: must be >= 0 (0 = no limit)", c.timeout)
	case c.grace < 0:
		return fmt.Errorf("--grace %v: must be >= 0", c.grace)
	}
	for _, err := range []error{
		share("async-share", c.asyncShare),
		share("internal-rate", c.internalRate),
		share("restart-at", c.restartAt),
		share("reset-at", c.resetAt),
		positive("time-scale", c.timeScale),
		positive("consume-rate", c.consumeRate),
		positive("reread-rate", c.rereadRate),
	} {
		if err != nil {
			return err
		}
	}
	if c.internalRate >= 1 {
		return fmt.Errorf("--internal-rate %v: must be below 1, or no send would ever succeed", c.internalRate)
	}
	if _, err := backoff.NewConnection(c.throttleConfig()); err != nil {
		return fmt.Errorf("--time-scale %v: %v", c.timeScale, err)
	}
	return nil
}

// throttleConfig is the gRPC connection backoff with its times scaled by
// --time-scale: the schedule the producer waits on after a 530.
func (c *demoConfig) throttleConfig() backoff.Config {
	d := backoff.DefaultConfig
	scale := func(t time.Duration) time.Duration {
		s := time.Duration(float64(t) * c.timeScale)
		if s < time.Microsecond {
			s = time.Microsecond
		}
		return s
	}
	d.BaseDelay = scale(d.BaseDelay)
	d.MaxDelay = scale(d.MaxDelay)
	d.MinConnectTimeout = scale(d.MinConnectTimeout)
	return d
}

// wireProtocol is the producer's protocol, from --protocol (validated).
func (c *demoConfig) wireProtocol() producer.Protocol {
	p, err := parseProtocol(c.protocol)
	if err != nil {
		panic(err) // validated with the flags
	}
	return p
}

// throttleCode is how the protocol spells a throttle: 530 on rocketry.v1,
// 42900 on apache.rocketmq.v2.
func throttleCode(protocol string) string {
	if protocol == producer.RocketMQ5.String() {
		return "42900"
	}
	return "530"
}

// asyncCount is how many of the messages are sent with SendAsync.
func (c *demoConfig) asyncCount() int {
	return int(math.Round(float64(c.messages) * c.asyncShare))
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	var c demoConfig
	fs := demoFlags(&c)
	if code, ok := parseFlags("demo", fs, args, stdout, stderr); !ok {
		return code
	}
	if err := c.validate(); err != nil {
		fmt.Fprintf(stderr, "rocketry demo: %v\n", err)
		return 2
	}
	stop := watchStop("demo", c.timeout, stderr)
	defer stop.stop()
	sum, err := demo(&c, stop, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "rocketry demo: %s\n", cleanError(err))
		return 1
	}
	if c.jsonOut {
		if err := sum.writeJSON(stdout); err != nil {
			fmt.Fprintf(stderr, "rocketry demo: %v\n", err)
			return 1
		}
	} else {
		sum.writeText(stdout)
	}
	switch {
	case stop.interrupted():
		return exitInterrupted
	case !sum.ok():
		return 1
	}
	return 0
}
