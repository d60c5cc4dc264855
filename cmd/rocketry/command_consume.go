package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// consumeConfig is the flags of "rocketry consume".
type consumeConfig struct {
	addr        string
	topic       string
	group       string
	rate        float64
	resetOffset int64
	count       int64
	duration    time.Duration
	batch       int
	poll        time.Duration
	quiet       bool
	tls         tlsFlags
}

func consumeFlags(c *consumeConfig) *flag.FlagSet {
	fs := newFlagSet("consume")
	fs.StringVar(&c.addr, "addr", defaultAddr(), "broker `address` ($"+addrEnv+", when set, changes the default)")
	fs.StringVar(&c.topic, "topic", "", "topic to read (required)")
	fs.StringVar(&c.group, "group", "rocketry-consume", "consumer group")
	fs.Float64Var(&c.rate, "rate", 0, "messages per second at most; 0 = as fast as the broker answers")
	fs.Int64Var(&c.resetOffset, "reset-offset", -1, "first reset the group to this offset on every queue (0 re-reads the whole log); -1 = no reset")
	fs.Int64Var(&c.count, "count", 0, "stop after this many messages; 0 = no limit")
	fs.DurationVar(&c.duration, "duration", 0, "stop after this long; 0 = until SIGINT/SIGTERM")
	fs.IntVar(&c.batch, "batch", 32, "messages per receive call at most")
	fs.DurationVar(&c.poll, "poll", 100*time.Millisecond, "wait this long when there is nothing to read")
	fs.BoolVar(&c.quiet, "quiet", false, "print only the summary, not one line per message")
	c.tls.bind(fs)
	return fs
}

func (c *consumeConfig) validate() error {
	switch {
	case c.topic == "":
		return errors.New("--topic is required")
	case c.group == "":
		return errors.New("--group must not be empty")
	case c.rate < 0 || math.IsNaN(c.rate) || math.IsInf(c.rate, 0):
		return fmt.Errorf("--rate %v must be a finite number >= 0", c.rate)
	case c.resetOffset < -1:
		return fmt.Errorf("--reset-offset %d must be an offset >= 0, or -1 for none", c.resetOffset)
	case c.count < 0:
		return fmt.Errorf("--count %d is negative", c.count)
	case c.duration < 0:
		return fmt.Errorf("--duration %v is negative", c.duration)
	case c.batch < 1 || c.batch > 10_000:
		return fmt.Errorf("--batch %d must be in 1..10000", c.batch)
	case c.poll <= 0:
		return fmt.Errorf("--poll %v must be positive", c.poll)
	}
	return nil
}

func runConsume(args []string, stdout, stderr io.Writer) int {
	var c consumeConfig
	if code, ok := parseFlags("consume", consumeFlags(&c), args, stdout, stderr); !ok {
		return code
	}
	if err := c.validate(); err != nil {
		fmt.Fprintf(stderr, "rocketry consume: %v\n", err)
		return 2
	}
	creds, err := c.tls.dialOption()
	if err != nil {
		fmt.Fprintf(stderr, "rocketry consume: %v\n", err)
		return 2
	}
	conn, err := grpc.NewClient(c.addr, creds)
	if err != nil {
		fmt.Fprintf(stderr, "rocketry consume: --addr %q: %v\n", c.addr, err)
		return 2
	}
	defer conn.Close()
	ctx, stop := signalContext()
	defer stop()
	if c.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.duration)
		defer cancel()
	}
	n, err := consume(ctx, rocketryv1.NewConsumerServiceClient(conn), &c, stdout)
	fmt.Fprintf(stdout, "received %s of topic %s as group %s\n", plural(n, "message", "messages"), c.topic, c.group)
	if err != nil {
		fmt.Fprintf(stderr, "rocketry consume: %s\n", cleanError(err))
		return 1
	}
	return 0
}

// consume reads until c.count messages, or until ctx ends (which is not a
// failure), and returns how many it read.
func consume(ctx context.Context, cl rocketryv1.ConsumerServiceClient, c *consumeConfig, out io.Writer) (int64, error) {
	if c.resetOffset >= 0 {
		if _, err := cl.ResetOffset(ctx, &rocketryv1.ResetOffsetRequest{Topic: c.topic, Group: c.group, Offset: c.resetOffset}); err != nil {
			return 0, fmt.Errorf("reset offset: %w", err)
		}
	}
	var lim *rate.Limiter
	burst := c.batch
	if c.rate > 0 {
		burst = max(1, min(c.batch, int(math.Ceil(c.rate))))
		lim = rate.NewLimiter(rate.Limit(c.rate), burst)
	}
	var n int64
	for c.count == 0 || n < c.count {
		want := burst
		if c.count > 0 {
			want = int(min(int64(want), c.count-n))
		}
		if lim != nil {
			if err := lim.WaitN(ctx, want); err != nil {
				return n, nil // ctx ended, or it would end before the tokens come
			}
		}
		resp, err := cl.ReceiveMessages(ctx, &rocketryv1.ReceiveMessagesRequest{
			Topic: c.topic, Group: c.group, MaxMessages: int32(want), AutoCommit: true,
		})
		if err != nil {
			if ctxEnded(ctx) {
				return n, nil
			}
			return n, fmt.Errorf("receive: %w", err)
		}
		for _, m := range resp.Messages {
			if !c.quiet {
				fmt.Fprintf(out, "queue %d offset %d id %s tag %q %d bytes\n",
					m.QueueId, m.Offset, m.Message.GetMessageId(), m.Message.GetTag(), len(m.Message.GetBody()))
			}
		}
		n += int64(len(resp.Messages))
		if len(resp.Messages) == 0 {
			t := time.NewTimer(c.poll)
			select {
			case <-ctx.Done():
				t.Stop()
				return n, nil
			case <-t.C:
			}
		}
	}
	return n, nil
}

// ctxEnded reports whether ctx is done or past its deadline: gRPC's own
// deadline timer can end a call a moment before ctx's timer fires.
func ctxEnded(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}
