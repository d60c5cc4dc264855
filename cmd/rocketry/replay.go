package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rocketry-go/rocketry/producer"
	"github.com/rocketry-go/rocketry/producer/deadletter"
)

func init() {
	register(command{name: "replay", summary: "resend a dead-letter store to a broker, removing what is stored", run: runReplay})
}

// replayConfig holds the replay command's flags.
type replayConfig struct {
	spool          string
	addr           string
	maxAttempts    int
	attemptTimeout time.Duration
	timeout        time.Duration
	maxThrottled   int
	failover       bool
	jsonOut        bool
	proto          protocolFlags

	set map[string]bool // flags given on the command line
}

func replayFlags(c *replayConfig) *flag.FlagSet {
	fs := newFlagSet("replay")
	fs.StringVar(&c.spool, "spool", "", "the dead-letter store file to replay (required)")
	fs.StringVar(&c.addr, "addr", "", "broker address HOST:PORT, or a comma-separated list of them (required)")
	fs.IntVar(&c.maxAttempts, "max-attempts", 3, "attempts per message, the first one included")
	fs.DurationVar(&c.attemptTimeout, "attempt-timeout", 3*time.Second, "time limit of one attempt")
	fs.DurationVar(&c.timeout, "timeout", 0, "give up after this long, keeping what was not sent (0 = no limit)")
	fs.IntVar(&c.maxThrottled, "max-throttled", 0, "stop (exit 1) after this many messages in a row throttled, keeping the rest for a later replay (0 = no limit)")
	fs.BoolVar(&c.failover, "failover-unknown", false, "send a message that may be stored on a broker (its outcome was unknown there) to another one when that broker is not in --addr or fails: it may then be stored twice")
	fs.BoolVar(&c.jsonOut, "json", false, "print the summary as one JSON object")
	c.proto.bind(fs)
	return fs
}

func (c *replayConfig) validate() error {
	if c.spool == "" {
		return errors.New("--spool is required")
	}
	if err := checkAddr(c.addr); err != nil {
		return err
	}
	if err := c.proto.validate(c.set); err != nil {
		return err
	}
	switch {
	case c.maxAttempts < 1:
		return fmt.Errorf("--max-attempts %d: must be >= 1", c.maxAttempts)
	case c.attemptTimeout <= 0:
		return fmt.Errorf("--attempt-timeout %v: must be > 0", c.attemptTimeout)
	case c.timeout < 0:
		return fmt.Errorf("--timeout %v: must be >= 0 (0 = no limit)", c.timeout)
	case c.maxThrottled < 0:
		return fmt.Errorf("--max-throttled %d: must be >= 0 (0 = no limit)", c.maxThrottled)
	}
	return nil
}

// replaySummary is what the replay command prints.
type replaySummary struct {
	Spool      string `json:"spool"`
	Read       int    `json:"read"`
	Stored     int    `json:"stored"`
	Duplicates int    `json:"duplicates"` // of Stored: already stored by the broker (rocketry.v1 only: RocketMQ 5 answers them OK)
	Failed     int    `json:"failed"`
	Left       int    `json:"left"` // not tried: --timeout or --max-throttled stopped the replay
	Corrupt    bool   `json:"corrupt"`
	Error      string `json:"error,omitempty"`
}

func runReplay(args []string, stdout, stderr io.Writer) int {
	c := replayConfig{set: map[string]bool{}}
	fs := replayFlags(&c)
	if code, ok := parseFlags("replay", fs, args, stdout, stderr); !ok {
		return code
	}
	fs.Visit(func(f *flag.Flag) { c.set[f.Name] = true })
	if err := c.validate(); err != nil {
		fmt.Fprintf(stderr, "rocketry replay: %v\n", err)
		return 2
	}
	opts := append(c.proto.options(), producer.WithMaxAttempts(c.maxAttempts), producer.WithAttemptTimeout(c.attemptTimeout))
	if c.failover {
		opts = append(opts, producer.WithFailoverOnUnknownOutcome())
	}
	p, err := producer.New(c.addr, opts...)
	if err != nil {
		flags := map[string]string{
			"WithMaxAttempts":    fmt.Sprintf("--max-attempts %d", c.maxAttempts),
			"WithAttemptTimeout": fmt.Sprintf("--attempt-timeout %v", c.attemptTimeout),
		}
		c.proto.flagsOf(flags)
		proto, _ := parseProtocol(c.proto.protocol)
		msg, code := newProducerError(err, flags, c.addr, proto)
		fmt.Fprintf(stderr, "rocketry replay: %s\n", msg)
		return code
	}
	ctx := context.Background()
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}

	sum := replaySummary{Spool: c.spool}
	var res deadletter.ReplayResult
	var store *deadletter.Store
	_, rerr := os.Stat(c.spool) // a replay never creates a store
	if rerr == nil {
		store, rerr = deadletter.Open(c.spool)
	}
	if rerr == nil {
		r := &firstFailure{p: p}
		res, rerr = store.Replay(ctx, r, deadletter.ReplayOptions{MaxThrottled: c.maxThrottled})
		if err := store.Close(); err != nil && rerr == nil {
			rerr = err
		}
		if rerr == nil && r.err != nil {
			sum.Error = oneLine(r.err.Error())
		}
	}

	closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Close(closeCtx); err != nil && rerr == nil {
		rerr = err
	}

	sum.Read, sum.Stored, sum.Duplicates, sum.Failed = res.Stored+res.Failed+res.Corrupt, res.Stored, res.Duplicates, res.Failed
	sum.Left, sum.Corrupt = res.Left, res.Corrupt > 0
	if rerr != nil {
		sum.Error = oneLine(rerr.Error())
	}
	if c.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(sum); err != nil {
			fmt.Fprintf(stderr, "rocketry replay: %v\n", err)
			return 1
		}
	} else {
		corrupt := "no"
		if sum.Corrupt {
			corrupt = fmt.Sprintf("%d records unreadable (kept; rocketry spool ls shows them)", res.Corrupt)
		}
		dups := fmt.Sprintf("%d already stored", sum.Duplicates)
		if c.proto.protocol == protoRocketMQ {
			dups = "RocketMQ 5 does not say which were already stored"
		}
		fmt.Fprintf(stdout, "replayed %s: read %d, stored %d (%s), failed %d (kept in the store), not tried %d, corrupt: %s\n",
			sum.Spool, sum.Read, sum.Stored, dups, sum.Failed, sum.Left, corrupt)
	}
	if sum.Error != "" {
		fmt.Fprintf(stderr, "rocketry replay: %s\n", sum.Error)
	}
	if rerr != nil || res.Failed > 0 || res.Corrupt > 0 || res.Left > 0 {
		return 1
	}
	return 0
}

// firstFailure resends with p and keeps the first failure, for the summary.
type firstFailure struct {
	p   *producer.Producer
	err error
}

func (f *firstFailure) Resend(ctx context.Context, d *producer.DeadLetter) (*producer.SendReceipt, error) {
	r, err := f.p.Resend(ctx, d)
	if err != nil && f.err == nil {
		f.err = fmt.Errorf("message %s: %w", d.Message.ID, err)
	}
	return r, err
}
