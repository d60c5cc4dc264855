package producer

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
)

// BenchmarkThousandsOfTopics sends the first message to each of
// $ROCKETRY_TOPICS (default 10,000) new topics in turn, one at a time, over
// each protocol, and reports (BENCHMARKS.md, "Thousands of topics"):
//
//   - first_ms@K: the first send to topic K (1, 1,000, 5,000, 10,000)
//     alone, and med_ms@K the median of the 100 topics up to it (1..100
//     for K=1), in milliseconds;
//   - cpu_us/topic: the CPU time of this process per new topic, over the
//     whole sweep (user + system, getrusage);
//   - heap_B/topic: the live heap after the sweep, less that before it,
//     per topic (after a GC each time), the producer holding every topic.
//
// The broker is $ROCKETRY_BENCH_BROKER (host:port of a `rocketry broker`
// in its own process, so that the CPU and heap are the producer's alone)
// or, without it, the bundled broker in this process on 127.0.0.1:0
// (whose CPU and heap then count too):
//
//	go run ./cmd/rocketry broker --listen 127.0.0.1:18081 &
//	ROCKETRY_BENCH_BROKER=127.0.0.1:18081 go test ./producer -run '^$' -bench ThousandsOfTopics -benchtime 1x
func BenchmarkThousandsOfTopics(b *testing.B) {
	n := 10000
	if s := os.Getenv("ROCKETRY_TOPICS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("ROCKETRY_TOPICS=%q: want a count", s)
		}
		n = v
	}
	addr := os.Getenv("ROCKETRY_BENCH_BROKER")
	if addr == "" {
		addr = brokertest.Start(b, broker.WithQueues(4)).Addr()
	}
	for _, proto := range []Protocol{RocketMQ5, RocketryV1} {
		b.Run(proto.String(), func(b *testing.B) {
			for range b.N {
				topicSweep(b, addr, proto, n)
			}
		})
	}
}

func topicSweep(b *testing.B, addr string, proto Protocol, n int) {
	ctx := context.Background()
	p, err := New(addr, WithProtocol(proto), WithPacing(true))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Close(ctx) }()
	run := strconv.FormatInt(time.Now().UnixNano(), 36) // new topics on a broker that outlives a run
	// One send before the sweep, so that the first topic's time is not
	// that of the connection's first call.
	if _, err := p.Send(ctx, &Message{Topic: "warm-" + run, Body: benchBody}); err != nil {
		b.Fatal(err)
	}
	heap0 := liveHeap()
	cpu0 := processCPU()
	took := make([]time.Duration, n)
	for i := range n {
		m := &Message{Topic: fmt.Sprintf("t-%s-%d", run, i+1), Body: benchBody}
		start := time.Now()
		if _, err := p.Send(ctx, m); err != nil {
			b.Fatalf("topic %d: %v", i+1, err)
		}
		took[i] = time.Since(start)
	}
	cpu := processCPU() - cpu0
	heap := liveHeap() - heap0
	runtime.KeepAlive(p)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, k := range []int{1, 1000, 5000, 10000} {
		if k > n {
			continue
		}
		hi := max(k, min(100, n)) // the window: the 100 topics up to k, or 1..100
		win := slices.Clone(took[hi-min(100, hi) : hi])
		slices.Sort(win)
		b.ReportMetric(ms(took[k-1]), "first_ms@"+strconv.Itoa(k))
		b.ReportMetric(ms(win[len(win)/2]), "med_ms@"+strconv.Itoa(k))
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu_us/topic")
	b.ReportMetric(float64(heap)/float64(n), "heap_B/topic")
}

// liveHeap is the live heap after a GC.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// processCPU is the user and system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
