package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// FleetProducer is one producer process of the fleet mode: Senders
// goroutines that each make one synchronous send at a time, in a loop,
// from Delay after the fleet's start until Duration after it, with
// contender Contender (NewHintlessSender) on the server at Addr.
type FleetProducer struct {
	Addr      string
	Contender string
	Senders   int
	// Delay is when this producer starts, after the fleet's start.
	Delay time.Duration
	// Duration is when every producer stops starting sends, after the
	// fleet's start; the sends in flight then finish.
	Duration    time.Duration
	MaxAttempts int
	SendTimeout time.Duration
	BodyBytes   int
	// Bin is the width of the bins its stores are counted in.
	Bin time.Duration
}

// Validate names the first field that is out of range, by its flag.
func (p FleetProducer) Validate() error {
	switch {
	case p.Addr == "":
		return errors.New("bench: fleet producer: --addr is empty")
	case p.Senders < 1:
		return errors.New("bench: fleet producer: --senders must be >= 1")
	case p.Delay < 0:
		return errors.New("bench: fleet producer: --delay must be >= 0")
	case p.Duration <= p.Delay:
		return errors.New("bench: fleet producer: --duration must be over --delay")
	case p.MaxAttempts < 1 || p.MaxAttempts > 5:
		return errors.New("bench: fleet producer: --attempts must be in [1, 5]")
	case p.SendTimeout <= 0:
		return errors.New("bench: fleet producer: --send-timeout must be > 0")
	case p.BodyBytes < 0:
		return errors.New("bench: fleet producer: --body must be >= 0")
	case p.Bin <= 0:
		return errors.New("bench: fleet producer: --bin must be > 0")
	}
	return nil
}

// FleetProducerResult is what a producer process reports: the one JSON
// line it writes at the end.
type FleetProducerResult struct {
	// Producer is its index in the fleet (set by the parent).
	Producer int `json:"producer"`
	// DelaySeconds is Delay; StartedSeconds is when its first send
	// started, after the fleet's start (late if the process was).
	DelaySeconds   float64 `json:"delay_seconds"`
	StartedSeconds float64 `json:"started_seconds"`
	// Sent, Failed and Stored are its sends: made, returned an error,
	// returned nil.
	Sent   int64 `json:"sent"`
	Failed int64 `json:"failed"`
	Stored int64 `json:"stored"`
	// Latency of one send, retries included, milliseconds.
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
	// Bins are its stored sends by the time they returned, per BinMs
	// since the fleet's start, up to Duration (those that returned later
	// are in Stored only).
	BinMs float64 `json:"bin_ms,omitempty"`
	Bins  []int64 `json:"bins,omitempty"`
}

// ServeFleetProducer runs p as a child of the fleet: it builds its sender,
// writes "ready" on out, reads "start UNIXNANO" from in (the fleet's
// start, a wall time), runs (Run), and writes its FleetProducerResult as
// one JSON line on out. It stops early when ctx ends or in ends (the
// parent is gone).
func ServeFleetProducer(ctx context.Context, p FleetProducer, in io.Reader, out io.Writer) error {
	if err := p.Validate(); err != nil {
		return err
	}
	sender, err := NewHintlessSender(p.Contender, p.Addr, p.MaxAttempts)
	if err != nil {
		return err
	}
	defer sender.Close()
	if _, err := io.WriteString(out, "ready\n"); err != nil {
		return fmt.Errorf("bench: fleet producer: %w", err)
	}
	lines := make(chan string, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		// The first line is "start"; the end of in cancels the run.
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			select {
			case lines <- strings.TrimSpace(sc.Text()):
			default: // later lines are ignored
			}
		}
		cancel()
	}()
	var line string
	select {
	case line = <-lines:
	case <-ctx.Done():
		return errors.New("bench: fleet producer: stdin ended before \"start UNIXNANO\"")
	}
	at, ok := strings.CutPrefix(line, "start ")
	n, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil {
		return fmt.Errorf("bench: fleet producer: read %q; want \"start UNIXNANO\"", line)
	}
	// The fleet's start on this process's monotonic clock.
	now := time.Now()
	zero := now.Add(time.Unix(0, n).Sub(now.Round(0)))
	res, err := p.Run(ctx, zero, NewIDs(p.Contender+"-"+strconv.Itoa(os.Getpid())), sender)
	if err != nil {
		return err
	}
	if err := json.NewEncoder(out).Encode(res); err != nil {
		return fmt.Errorf("bench: fleet producer: %w", err)
	}
	return nil
}

// Run makes p's sends with sender, zero being the fleet's start, and
// counts them. It returns ctx's error if ctx ends first.
func (p FleetProducer) Run(ctx context.Context, zero time.Time, ids *IDs, sender Sender) (*FleetProducerResult, error) {
	body := make([]byte, p.BodyBytes)
	startAt, stopAt := zero.Add(p.Delay), zero.Add(p.Duration)
	nbins := int((p.Duration + p.Bin - 1) / p.Bin)
	bins := make([]atomic.Int64, nbins)
	var sent, failed, stored atomic.Int64
	lat := make([][]time.Duration, p.Senders)
	waitUntil(ctx, startAt)
	started := time.Since(zero)
	var wg sync.WaitGroup
	for i := range p.Senders {
		wg.Go(func() {
			for time.Now().Before(stopAt) && ctx.Err() == nil {
				sctx, cancel := context.WithTimeout(ctx, p.SendTimeout)
				t0 := time.Now()
				err := sender.Send(sctx, ids.Next(), body)
				end := time.Now()
				cancel()
				lat[i] = append(lat[i], end.Sub(t0))
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					continue
				}
				stored.Add(1)
				if k := int(end.Sub(zero) / p.Bin); k >= 0 && k < nbins && end.Before(stopAt) {
					bins[k].Add(1)
				}
			}
		})
	}
	wg.Wait() // the sends in flight finish (bounded by SendTimeout)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res := &FleetProducerResult{
		DelaySeconds: p.Delay.Seconds(), StartedSeconds: started.Seconds(),
		Sent: sent.Load(), Failed: failed.Load(), Stored: stored.Load(),
		BinMs: float64(p.Bin) / float64(time.Millisecond), Bins: make([]int64, nbins),
	}
	for k := range bins {
		res.Bins[k] = bins[k].Load()
	}
	all := slices.Concat(lat...)
	res.P50ms, res.P99ms = percentileMs(all, 0.50), percentileMs(all, 0.99)
	return res, nil
}
