// Package paired measures an operation against a baseline in the same
// process, in alternating batches, so that the load of other processes on
// a noisy machine hits both alike. It is for benchmarks: the fast path's
// (internal/bench), the OpenTelemetry adapter's and the one beside the
// official Go client.
package paired

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BatchSize is how many calls of each side a batch of Run makes.
const BatchSize = 128

// Batch runs n calls of op over conc goroutines (fresh ones, as request
// handlers are) and returns the wall time and the process's CPU time
// (user + system) they took. A failed call fails b.
func Batch(b *testing.B, conc, n int, op func(context.Context) error) (wall, cpu time.Duration) {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	cpu0 := processCPU()
	start := time.Now()
	for range min(conc, n) {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := op(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), processCPU() - cpu0
}

// Run makes b.N calls of op and as many of base over conc goroutines, in
// alternating batches of BatchSize (which goes first alternates too), and
// reports, with base named baseName: ns/op and cpu-ns/op (op's),
// baseName-ns/op and baseName-cpu-ns/op (base's), and x-baseName and
// x-baseName-cpu, the median over batch pairs of op's time over base's
// (1.05: 5% slower).
func Run(b *testing.B, conc int, baseName string, op, base func(context.Context) error) {
	var tA, tB, cA, cB time.Duration
	var ratios, cpuRatios []float64
	b.ResetTimer()
	for done, i := 0, 0; done < b.N; done, i = done+BatchSize, i+1 {
		n := min(BatchSize, b.N-done)
		var a, r, ac, rc time.Duration
		if i%2 == 0 {
			r, rc = Batch(b, conc, n, base)
			a, ac = Batch(b, conc, n, op)
		} else {
			a, ac = Batch(b, conc, n, op)
			r, rc = Batch(b, conc, n, base)
		}
		tA, tB, cA, cB = tA+a, tB+r, cA+ac, cB+rc
		ratios = append(ratios, float64(a)/float64(r))
		if rc > 0 {
			cpuRatios = append(cpuRatios, float64(ac)/float64(rc))
		}
	}
	b.StopTimer()
	perOp := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	b.ReportMetric(perOp(tA), "ns/op")
	b.ReportMetric(perOp(tB), baseName+"-ns/op")
	b.ReportMetric(perOp(cA), "cpu-ns/op")
	b.ReportMetric(perOp(cB), baseName+"-cpu-ns/op")
	b.ReportMetric(Median(ratios), "x-"+baseName)
	if len(cpuRatios) > 0 {
		b.ReportMetric(Median(cpuRatios), "x-"+baseName+"-cpu")
	}
}

// Median is the median of xs (the upper one of an even count); xs is
// sorted in place.
func Median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// processCPU returns the process's user + system CPU time so far (0 where
// getrusage fails).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
