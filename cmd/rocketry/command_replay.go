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

// replayConfig holds the replay command's flags.
type replayConfig struct {
	spool          string
	addr           string
	maxAttempts    int
	attemptTimeout time.Duration
	timeout        time.Duration
	grace          time.Duration
	maxThrottled   int
	failover       bool
	jsonOut        bool
	quiet          bool
	proto          protocolFlags

	set map[string]bool // flags given on the command line
}

func replayFlags(c *replayConfig) *flag.FlagSet {
	fs := newFlagSet("replay")
	fs.StringVar(&c.spool, "spool", "", "the dead-letter store file to replay (required)")
	fs.StringVar(&c.addr, "addr", defaultAddr(), "broker address HOST:PORT, or a comma-separated list of them ($"+addrEnv+", when set, changes the default)")
	fs.IntVar(&c.maxAttempts, "max-attempts", 3, "attempts per message, the first one included")
	fs.DurationVar(&c.attemptTimeout, "attempt-timeout", 3*time.Second, "time limit of one attempt")
	fs.DurationVar(&c.timeout, "timeout", 0, "stop after this long, keeping what was not sent in the store (0 = no limit)")
	fs.DurationVar(&c.grace, "grace", defaultGrace, "after --timeout or SIGINT/SIGTERM, how long the send in flight gets to finish")
	fs.IntVar(&c.maxThrottled, "max-throttled", 0, "stop (exit 1) after this many messages in a row throttled, keeping the rest for a later replay (0 = no limit)")
	fs.BoolVar(&c.failover, "failover-unknown", false, "send a message that may be stored on a broker (its outcome was unknown there) to another one when that broker is not in --addr or fails: it may then be stored twice")
	fs.BoolVar(&c.jsonOut, "json", false, "print the summary as one JSON object")
	fs.BoolVar(&c.quiet, "quiet", false, "no live progress on stderr (it shows only on a terminal anyway)")
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
	case c.grace < 0:
		return fmt.Errorf("--grace %v: must be >= 0", c.grace)
	case c.maxThrottled < 0:
		return fmt.Errorf("--max-throttled %d: must be >= 0 (0 = no limit)", c.maxThrottled)
	}
	return nil
}

// replaySummary is what the replay command prints.
type replaySummary struct {
	Spool      string `json:"spool"`
	Read       int    `json:"read"` // the records tried (Stored, Failed), the damaged ones and the already delivered ones
	Stored     int    `json:"stored"`
	Duplicates int    `json:"duplicates"` // of Stored: already stored by the broker (rocketry.v1 only: RocketMQ 5 answers them OK)
	Failed     int    `json:"failed"`     // sent and failed, kept in the store
	Left       int    `json:"left"`       // not tried: a stop, --timeout or --max-throttled ended the replay first; kept in the store
	Corrupt    bool   `json:"corrupt"`    // some records are damaged (Damaged)
	Damaged    int    `json:"damaged"`    // records whose checksum fails or that do not decode: never sent, kept
	// AlreadyDelivered counts the records a replay had delivered that came
	// back (a store read as of an older transaction): deleted, not sent.
	AlreadyDelivered int    `json:"already_delivered"`
	Stopped          string `json:"stopped,omitempty"` // why the run stopped early: --timeout, a signal
	Error            string `json:"error,omitempty"`
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
	opts, err := c.proto.options()
	if err != nil {
		fmt.Fprintf(stderr, "rocketry replay: %v\n", err)
		return 2
	}
	k := newSendCounters(0)
	opts = append(opts, producer.WithMaxAttempts(c.maxAttempts), producer.WithAttemptTimeout(c.attemptTimeout), producer.WithObserver(k.observe))
	if c.failover {
		opts = append(opts, producer.WithFailoverOnUnknownOutcome())
	}
	// A replay never creates a store; one it cannot open is the summary's
	// error, found before any connection is made.
	var store *deadletter.Store
	total := -1
	_, rerr := os.Stat(c.spool)
	if rerr == nil {
		store, rerr = deadletter.Open(c.spool)
	}
	if rerr == nil {
		defer store.Close()
		total, rerr = store.Len()
	}
	var p *producer.Producer
	if rerr == nil {
		p, err = producer.New(c.addr, opts...)
	}
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
	stop, disp := c.watch(k, int64(total), stderr)
	defer stop.stop()
	defer disp.finish()
	// The send in flight at a stop gets --grace; Replay sends no more once
	// stop.ctx has ended.
	graceCtx, cancelGrace := stop.graceContext(c.grace)
	defer cancelGrace()

	sum := replaySummary{Spool: c.spool}
	rs := &replaySender{p: p, ctx: graceCtx, k: k}
	var res deadletter.ReplayResult
	if rerr == nil {
		res, rerr = store.Replay(stop.ctx, rs, deadletter.ReplayOptions{MaxThrottled: c.maxThrottled})
		if why := stop.why(); why != nil {
			sum.Stopped = why.Error()
			if errors.Is(rerr, context.Canceled) || errors.Is(rerr, context.DeadlineExceeded) {
				rerr = nil // the summary says why it stopped
			}
		}
		if err := store.Close(); err != nil && rerr == nil {
			rerr = err
		}
	}
	disp.finish()

	closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if p != nil {
		if err := p.Close(closeCtx); err != nil && rerr == nil {
			rerr = err
		}
	}

	sum.Read, sum.Stored, sum.Duplicates, sum.Failed = res.Stored+res.Failed+res.Corrupt+res.AlreadyDelivered, res.Stored, res.Duplicates, res.Failed
	sum.Left, sum.Corrupt, sum.Damaged, sum.AlreadyDelivered = res.Left, res.Corrupt > 0, res.Corrupt, res.AlreadyDelivered
	if rerr != nil {
		sum.Error = cleanError(rerr)
	} else if rs.err != nil {
		sum.Error = cleanError(rs.err)
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
			corrupt = fmt.Sprintf("%d records damaged (never sent, kept; rocketry spool check shows them)", res.Corrupt)
		}
		dups := fmt.Sprintf("%d already stored", sum.Duplicates)
		if c.proto.protocol == protoRocketMQ {
			dups = "RocketMQ 5 does not say which were already stored"
		}
		fmt.Fprintf(stdout, "replayed %s: read %d, stored %d (%s), failed %d (kept in the store), not tried %d, corrupt: %s\n",
			sum.Spool, sum.Read, sum.Stored, dups, sum.Failed, sum.Left, corrupt)
		if sum.AlreadyDelivered > 0 {
			fmt.Fprintf(stdout, "%s delivered by an earlier replay came back (the store was read as of an older transaction): deleted, not sent again\n", plural(int64(sum.AlreadyDelivered), "record", "records"))
		}
		if sum.Stopped != "" {
			fmt.Fprintf(stdout, "stopped (%s): %s not tried, kept in the store\n", sum.Stopped, plural(int64(sum.Left), "record", "records"))
		}
	}
	if sum.Error != "" {
		fmt.Fprintf(stderr, "rocketry replay: %s\n", sum.Error)
	}
	switch {
	case stop.interrupted():
		return exitInterrupted
	case rerr != nil || res.Failed > 0 || res.Corrupt > 0 || res.Left > 0:
		return 1
	}
	return 0
}

// watch starts the replay's stop watch and live display, with the store's
// records as its total.
func (c *replayConfig) watch(k *sendCounters, total int64, stderr io.Writer) (*stopper, *liveProgress) {
	stop := watchStop("replay", c.timeout, stderr)
	disp := startProgress(stderr, c.quiet, "replaying", total, k.done.Load, func(elapsed time.Duration, room int) string {
		return sendStatus(k, total, elapsed, room)
	})
	stop.onExit(disp.finish)
	stop.onStop(func(why error) {
		disp.setNote(stderr, c.quiet, "rocketry replay", stoppingNote(why, c.grace, false))
	})
	return stop, disp
}

// replaySender resends each record with p on ctx (which ends --grace after
// a stop), counts it for the display, and keeps the first failure for the
// summary.
type replaySender struct {
	p   *producer.Producer
	ctx context.Context
	k   *sendCounters
	err error
}

func (s *replaySender) Resend(_ context.Context, d *producer.DeadLetter) (*producer.SendReceipt, error) {
	start := time.Now()
	s.k.inFlight.Add(1)
	r, err := s.p.Resend(s.ctx, d)
	s.k.ended(start, err)
	if err != nil && s.err == nil {
		s.err = fmt.Errorf("message %s: %w", d.Message.ID, err)
	}
	return r, err
}
