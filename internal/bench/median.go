package bench

// This file sums up runs: the median over rounds and the summary lines.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/producer"
)

// Median returns, for each figure, its median over rs (runs of one
// contender); the counts are medians too, so the row may not add up.
func Median(rs []*Result) *Result {
	if len(rs) == 1 {
		return rs[0]
	}
	med := func(f func(*Result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	medI := func(f func(*Result) int64) int64 {
		return int64(med(func(r *Result) float64 { return float64(f(r)) }) + 0.5)
	}
	m := &Result{Contender: rs[0].Contender, DrainRate: rs[0].DrainRate, Runs: len(rs)}
	m.Goodput = med(func(r *Result) float64 { return r.Goodput })
	m.Drained = med(func(r *Result) float64 { return r.Drained })
	m.GoodputRatio = med(func(r *Result) float64 { return r.GoodputRatio })
	m.DrainedRatio = med(func(r *Result) float64 { return r.DrainedRatio })
	m.Amplification = med(func(r *Result) float64 { return r.Amplification })
	m.Attempts = medI(func(r *Result) int64 { return r.Attempts })
	m.Refused = medI(func(r *Result) int64 { return r.Refused })
	m.RefusedBacklog = medI(func(r *Result) int64 { return r.RefusedBacklog })
	m.RefusedStorage = medI(func(r *Result) int64 { return r.RefusedStorage })
	m.Sent = medI(func(r *Result) int64 { return r.Sent })
	m.Stored = medI(func(r *Result) int64 { return r.Stored })
	m.Failed = medI(func(r *Result) int64 { return r.Failed })
	m.StoredButFailed = medI(func(r *Result) int64 { return r.StoredButFailed })
	m.P50ms = med(func(r *Result) float64 { return r.P50ms })
	m.P99ms = med(func(r *Result) float64 { return r.P99ms })
	for _, r := range rs {
		m.Lost += r.Lost // any loss is reported, not a median
		m.Errors = append(m.Errors, r.Errors...)
	}
	m.Timing = medianTiming(rs, func(r *Result) *Timing { return r.Timing })
	m.TimerControl = medianTiming(rs, func(r *Result) *Timing { return r.TimerControl })
	return m
}

// medianTiming sums the counts of the runs' timings and takes the median of
// their quantiles; nil when the runs have none.
func medianTiming(rs []*Result, get func(*Result) *Timing) *Timing {
	var ts []*Timing
	for _, r := range rs {
		if t := get(r); t != nil {
			ts = append(ts, t)
		}
	}
	if len(ts) == 0 {
		return nil
	}
	med := func(f func(*Timing) float64) float64 {
		v := make([]float64, len(ts))
		for i, t := range ts {
			v[i] = f(t)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	m := &Timing{}
	for _, t := range ts {
		m.Retries += t.Retries
		m.Early += t.Early
		m.MaxMs = max(m.MaxMs, t.MaxMs)
	}
	m.P50ms = med(func(t *Timing) float64 { return t.P50ms })
	m.P90ms = med(func(t *Timing) float64 { return t.P90ms })
	m.P99ms = med(func(t *Timing) float64 { return t.P99ms })
	return m
}

// String is a one-line summary, for logs.
func (r *Result) String() string {
	s := r.Contender + ": goodput " + strconv.FormatFloat(r.Goodput, 'f', 0, 64) + "/s, amplification " + strconv.FormatFloat(r.Amplification, 'f', 2, 64)
	if len(r.FailedBy) > 0 {
		s += fmt.Sprintf(", failed %v", r.FailedBy)
	}
	return s
}

// failureKind names why a send failed: the reason a *producer.SendError
// gives, with the last outcome, or the gRPC code of another error.
func failureKind(err error) string {
	var se *producer.SendError
	if errors.As(err, &se) {
		for _, k := range []error{producer.ErrAttemptsExhausted, producer.ErrDeadlineTooShort, producer.ErrNotRetryable, producer.ErrRetryBudget, producer.ErrClosed, context.DeadlineExceeded, context.Canceled} {
			if errors.Is(err, k) {
				return strings.TrimPrefix(k.Error(), "producer: ") + " after " + se.Last.String()
			}
		}
		return se.Last.String()
	}
	return status.Code(err).String()
}
