package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rocketry-go/rocketry/producer"
)

// errInputEnded is the input's end, reached before a stop.
var errInputEnded = errors.New("input ended")

// produce sends every message of the input, paced by --rate, until stop
// ends (a signal, --timeout), and returns when it stops taking messages:
// the sends in flight go on. The sends are not bound to stop: Close ends
// them (closeWhen). It returns the error that stopped the input (stdin
// unreadable), stop's error, or nil at the input's end.
func (c *produceConfig) produce(stop context.Context, p *producer.Producer, run *produceRun, stderr io.Writer) error {
	start := time.Now()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	n := 0
	return c.messages(stop, run, stderr, func(body []byte) error {
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
				case <-stop.Done():
					return stop.Err()
				}
			}
		}
		if err := stop.Err(); err != nil {
			return err
		}
		n++
		m := &producer.Message{Topic: c.topic, Tag: c.tag, Body: body, MessageGroup: c.group}
		if c.deliverAfter > 0 {
			m.DeliveryTime = time.Now().Add(c.deliverAfter)
		}
		sendStart := time.Now()
		run.k.inFlight.Add(1)
		if !c.async {
			r, err := p.Send(context.Background(), m)
			if refused(err) {
				run.k.inFlight.Add(-1)
				return stop.Err()
			}
			run.sent.Add(1)
			run.done(sendStart, r, err)
			return nil
		}
		run.wg.Add(1)
		err := p.SendAsync(context.Background(), m, func(r *producer.SendReceipt, err error) {
			run.done(sendStart, r, err)
			run.wg.Done()
		})
		if err != nil { // refused: the callback never runs
			run.k.inFlight.Add(-1)
			run.wg.Done()
			if refused(err) {
				return stop.Err()
			}
			return fmt.Errorf("send refused: %w", err)
		}
		run.sent.Add(1)
		return nil
	})
}

// refused reports whether a send ended without being accepted, because the
// producer was closing (the command is stopping).
func refused(err error) bool {
	var se *producer.SendError
	return errors.Is(err, producer.ErrClosed) && !errors.As(err, &se)
}

// messages calls send with the body of each message: --count generated
// ones, or one per stdin line, until stop ends. It stops at the first
// error send returns. A stdin line over the body limit is skipped with
// one line on stderr naming it; the lines after it are still read.
func (c *produceConfig) messages(stop context.Context, run *produceRun, stderr io.Writer, send func(body []byte) error) error {
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
		return errInputEnded
	}
	rctx, cancel := context.WithCancel(stop)
	defer cancel() // the reader ends with messages
	lines := readLines(rctx, produceStdin, producer.DefaultMaxBodyBytes)
	for {
		var l line
		select {
		case <-stop.Done():
			return stop.Err()
		case l = <-lines:
		}
		switch {
		case l.n == 0:
			return errInputEnded
		case l.err != nil:
			return fmt.Errorf("stdin line %d: %w", l.n, l.err)
		case l.over:
			run.skipped.Add(1)
			fmt.Fprintf(stderr, "rocketry produce: stdin line %d: longer than the %s-byte limit of a message body: not sent; reading on\n",
				l.n, fmtCount(producer.DefaultMaxBodyBytes))
			continue
		}
		if err := send(l.body); err != nil {
			return err
		}
	}
}
