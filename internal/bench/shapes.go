package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// RocketryNoPacing is rocketry with WithPacing(false): the same producer
// as Rocketry, for the ratios of issue 20 (pacing must not slow what the
// broker accepts).
const RocketryNoPacing = "rocketry-nopacing"

// RocketryAsync is rocketry with pacing on whose sends are SendAsync calls
// (batched, WithBatching's default), each sender waiting for its callback
// before its next send.
const RocketryAsync = "rocketry-async"

// ShapeContenders lists the contenders of the shapes: rocketry paced and
// not, and go-grpc-middleware's retry beside.
var ShapeContenders = []string{Rocketry, RocketryNoPacing, Middleware}

// counted reports whether h's shape runs a count of sends, timed, rather
// than a duration.
func (h Hintless) counted() bool {
	return h.Shape == ShapeHot || h.Shape == ShapeOneInTen
}

// runCount makes h.Sends sends from h.Senders senders and times them:
// with ShapeHot, the even senders send to topic "hot" (refused always) and
// the odd ones to "cold", and the time and failures are cold's (a
// throttled topic must not slow another); with ShapeOneInTen, all of them.
func (h Hintless) runCount(ctx context.Context, name string, sender Sender, srv *serverProcess, before ServerStats) (*HintlessResult, error) {
	body := make([]byte, h.BodyBytes)
	ids := NewIDs(name)
	hot, cold := sender, sender
	if h.Shape == ShapeHot {
		hot, cold = withTopic(sender, hotTopic), withTopic(sender, coldTopic)
	}
	var next, sent, failed, timedFailed atomic.Int64
	var mu sync.Mutex
	var last time.Duration // the end of the last timed send
	lat := make([][]time.Duration, h.Senders)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range h.Senders {
		timed := h.Shape != ShapeHot || i%2 == 1
		s := cold
		if !timed {
			s = hot
		}
		wg.Go(func() {
			for ctx.Err() == nil && next.Add(1) <= int64(h.Sends) {
				sctx, cancel := context.WithTimeout(ctx, h.SendTimeout)
				t0 := time.Now()
				err := s.Send(sctx, ids.Next(), body)
				cancel()
				end := time.Since(start)
				sent.Add(1)
				if err != nil {
					failed.Add(1)
				}
				if !timed {
					continue
				}
				lat[i] = append(lat[i], time.Since(t0))
				if err != nil {
					timedFailed.Add(1)
				}
				mu.Lock()
				last = max(last, end)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	after, err := srv.stats()
	if err != nil {
		return nil, err
	}
	res := &HintlessResult{Contender: name, Sent: sent.Load(), Failed: failed.Load(), TimedFailed: timedFailed.Load(), Seconds: last.Seconds()}
	res.WindowSeconds = res.Seconds
	res.Attempts = after.Requests - before.Requests
	res.Stored = after.Stored - before.Stored
	res.Refused = after.Refused - before.Refused
	if res.Stored > 0 {
		res.AttemptsPerStored = float64(res.Attempts) / float64(res.Stored)
	}
	all := slices.Concat(lat...)
	res.P50ms, res.P99ms = percentileMs(all, 0.50), percentileMs(all, 0.99)
	return res, nil
}

// withTopic is s sending to topic; closing it closes nothing (s is closed
// by its owner).
func withTopic(s Sender, topic string) Sender {
	switch v := s.(type) {
	case *rocketrySender:
		return &noClose{&rocketrySender{p: v.p, topic: topic}}
	case *rawSender:
		return &noClose{&rawSender{cc: v.cc, client: v.client, topic: topic}}
	}
	return s
}

type noClose struct{ Sender }

func (noClose) Close() error { return nil }

// shapeWords says what the server of a shape does, for the tables.
var shapeWords = map[string]string{
	ShapeHot:      `refuses topic "hot" always (530 BACKLOG, no RetryInfo) and stores topic "cold"; timed: the sends to "cold"`,
	ShapeOneInTen: "refuses one message in ten, once (530, no RetryInfo)",
	ShapeQueue:    "serves a send queue at the rate and refuses a request that waited over 200 ms in it (530, \"[TIMEOUT_CLEAN_QUEUE]broker busy\", no RetryInfo)",
}

// writeShapeMarkdown writes the table of a shape other than ShapeBucket.
func (rep *HintlessReport) writeShapeMarkdown(w io.Writer) {
	s := rep.Settings
	if s.Shape == ShapeHotCold {
		rep.writeHotColdMarkdown(w)
		return
	}
	one := func(v float64) float64 { return v }
	if s.Sends == 0 { // ShapeQueue: a duration, as the bucket
		fmt.Fprintf(w, "shape %s: %d senders for %gs per contender against a server in its own process that %s at %g msg/s; %d attempts per send; %s%s\n\n",
			s.Shape, s.Senders, s.DurationSeconds, shapeWords[s.Shape], s.Rate, s.MaxAttempts, hogWords(s.Hog), rounds(s.Rounds))
		fmt.Fprintln(w, "| contender | stored msg/s | stored/capacity | attempts/stored | sends | failed | p50 ms | p99 ms |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
		pct := func(v float64) float64 { return 100 * v }
		for _, r := range rep.Summary {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Contender,
				r.StoredPerSecond.format("%.0f", "", one), r.CapacityRatio.format("%.1f", "%", pct),
				r.AttemptsPerStored.format("%.2f", "", one), r.Sent.format("%.0f", "", one), r.Failed.format("%.0f", "", one),
				r.P50ms.format("%.1f", "", one), r.P99ms.format("%.1f", "", one))
		}
		return
	}
	fmt.Fprintf(w, "shape %s: %d sends from %d senders per contender against a server in its own process that %s; %d attempts per send; %s%s\n\n",
		s.Shape, s.Sends, s.Senders, shapeWords[s.Shape], s.MaxAttempts, hogWords(s.Hog), rounds(s.Rounds))
	var off float64
	for _, r := range rep.Summary {
		if r.Contender == RocketryNoPacing {
			off = r.Seconds.Median
		}
	}
	fmt.Fprintln(w, "| contender | timed sends s | / pacing off | timed failed | attempts/stored | sends | failed | p50 ms | p99 ms |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rep.Summary {
		ratio := "-"
		if off > 0 {
			ratio = fmt.Sprintf("%.2fx", r.Seconds.Median/off)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Contender,
			r.Seconds.format("%.3f", "", one), ratio, r.TimedFailed.format("%.0f", "", one),
			r.AttemptsPerStored.format("%.2f", "", one), r.Sent.format("%.0f", "", one), r.Failed.format("%.0f", "", one),
			r.P50ms.format("%.1f", "", one), r.P99ms.format("%.1f", "", one))
	}
}
