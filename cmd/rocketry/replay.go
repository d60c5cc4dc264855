package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/rocketry-go/rocketry/producer"
)

func init() {
	register(command{name: "replay", summary: "resend a dead-letter spool to a broker, removing what is stored", run: runReplay})
}

// replayConfig holds the replay command's flags.
type replayConfig struct {
	spool          string
	addr           string
	maxAttempts    int
	attemptTimeout time.Duration
	timeout        time.Duration
	grace          time.Duration
	jsonOut        bool
	quiet          bool
	proto          protocolFlags

	set map[string]bool // flags given on the command line
}

func replayFlags(c *replayConfig) *flag.FlagSet {
	fs := newFlagSet("replay")
	fs.StringVar(&c.spool, "spool", "", "the dead-letter spool file to replay (required)")
	fs.StringVar(&c.addr, "addr", defaultAddr(), "broker address HOST:PORT, or a comma-separated list of them ($"+addrEnv+", when set, changes the default)")
	fs.IntVar(&c.maxAttempts, "max-attempts", 3, "attempts per message, the first one included")
	fs.DurationVar(&c.attemptTimeout, "attempt-timeout", 3*time.Second, "time limit of one attempt")
	fs.DurationVar(&c.timeout, "timeout", 0, "stop after this long, keeping what was not sent in the spool (0 = no limit)")
	fs.DurationVar(&c.grace, "grace", defaultGrace, "after --timeout or SIGINT/SIGTERM, how long the send in flight gets to finish")
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
	Corrupt    bool   `json:"corrupt"`
	NotTried   int    `json:"not_tried"`         // of Failed: never sent, the run stopped first
	Stopped    string `json:"stopped,omitempty"` // why the run stopped early: --timeout, a signal
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
	opts, err := c.proto.options()
	if err != nil {
		fmt.Fprintf(stderr, "rocketry replay: %v\n", err)
		return 2
	}
	k := newSendCounters(0)
	opts = append(opts, producer.WithMaxAttempts(c.maxAttempts), producer.WithAttemptTimeout(c.attemptTimeout), producer.WithObserver(k.observe))
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
	stop, disp := c.watch(k, stderr)
	defer stop.stop()
	defer disp.finish()
	// The send in flight at a stop gets --grace; ReplaySpool sends no
	// more once stop.ctx has ended.
	graceCtx, cancelGrace := stop.graceContext(c.grace)
	defer cancelGrace()

	sum := replaySummary{Spool: c.spool}
	var firstFailure error
	send := func(_ context.Context, m *producer.Message) error {
		start := time.Now()
		k.inFlight.Add(1)
		r, err := p.Send(graceCtx, m)
		k.ended(start, err)
		if err != nil {
			if firstFailure == nil {
				firstFailure = fmt.Errorf("message %s: %w", m.ID, err)
			}
			return err
		}
		if r.Duplicate {
			sum.Duplicates++
		}
		return nil
	}
	res, rerr := producer.ReplaySpool(stop.ctx, c.spool, send)
	disp.finish()
	if why := stop.why(); why != nil {
		sum.Stopped = why.Error()
		sum.NotTried = res.Read - int(k.done.Load())
		rerr = withoutCanceled(rerr)
	}

	closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Close(closeCtx); err != nil && rerr == nil {
		rerr = err
	}

	sum.Read, sum.Stored, sum.Failed, sum.Corrupt = res.Read, res.Stored, res.Failed, res.Corrupt
	if rerr != nil {
		sum.Error = cleanError(rerr)
	} else if firstFailure != nil {
		sum.Error = cleanError(firstFailure)
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
			corrupt = "yes (bad bytes saved next to the spool)"
		}
		dups := fmt.Sprintf("%d already stored", sum.Duplicates)
		if c.proto.protocol == protoRocketMQ {
			dups = "RocketMQ 5 does not say which were already stored"
		}
		fmt.Fprintf(stdout, "replayed %s: read %d, stored %d (%s), failed %d (kept in the spool), corrupt: %s\n",
			sum.Spool, sum.Read, sum.Stored, dups, sum.Failed, corrupt)
		if sum.Stopped != "" {
			fmt.Fprintf(stdout, "stopped (%s): %s not tried, kept in the spool\n", sum.Stopped, plural(int64(sum.NotTried), "record", "records"))
		}
	}
	if sum.Error != "" {
		fmt.Fprintf(stderr, "rocketry replay: %s\n", sum.Error)
	}
	switch {
	case stop.interrupted():
		return exitInterrupted
	case rerr != nil || res.Failed > 0 || res.Corrupt:
		return 1
	}
	return 0
}

// watch starts the replay's stop watch and live display, which counts the
// records of the spool (when it can read them) as its total.
func (c *replayConfig) watch(k *sendCounters, stderr io.Writer) (*stopper, *liveProgress) {
	stop := watchStop("replay", c.timeout, stderr)
	total := int64(-1)
	if recs, err := producer.ReadSpool(c.spool); err == nil && !c.quiet {
		total = int64(len(recs))
	}
	disp := startProgress(stderr, c.quiet, "replaying", total, k.done.Load, func(elapsed time.Duration, room int) string {
		return sendStatus(k, total, elapsed, room)
	})
	stop.onExit(disp.finish)
	stop.onStop(func(why error) {
		disp.setNote(stderr, c.quiet, "rocketry replay", stoppingNote(why, c.grace, true))
	})
	return stop, disp
}

// withoutCanceled drops the context error ReplaySpool adds when it is
// stopped: the summary says so.
func withoutCanceled(err error) error {
	if err == nil || errors.Is(err, context.Canceled) && !errors.Is(err, producer.ErrSpoolCorrupt) {
		return nil
	}
	return err
}
