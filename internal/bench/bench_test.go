package bench

import (
	"cmp"
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/rocketry-go/rocketry/internal/paired"
	"github.com/rocketry-go/rocketry/producer"
)

// The fast path, against the bundled broker on loopback in this process:
//
//	go test -run '^$' -bench . -benchmem -count 6 ./internal/bench/ | tee new.txt
//	go run golang.org/x/perf/cmd/benchstat@latest -col /contender new.txt
//
// Concurrency is exact: conc=C runs C goroutines that share b.N sends. An
// operation is one send of one 100-byte message with a fresh ID made by the
// same generator for every contender. allocs/op counts the broker's
// allocations too (same process): compare contenders, not absolute figures.
// With ROCKETRY_BENCH_BROKER=host:port they go to a `rocketry broker` in its
// own process instead, and allocs/op counts the client's alone:
//
//	go build -o /tmp/rocketry ./cmd/rocketry
//	/tmp/rocketry broker --listen 127.0.0.1:18093 --log-level error &
//	ROCKETRY_BENCH_BROKER=127.0.0.1:18093 go test -run '^$' -bench 'Send$' -benchmem ./internal/bench/

var smallBody = make([]byte, 100)

// brokerAddr is $ROCKETRY_BENCH_BROKER, or a bundled broker started in
// this process for b.
func brokerAddr(b *testing.B) string {
	if addr := os.Getenv("ROCKETRY_BENCH_BROKER"); addr != "" {
		return addr
	}
	return brokertest.Start(b).Addr()
}

// concurrencies are the callers of BenchmarkSend.
var concurrencies = []int{1, 64}

// runConc runs b.N calls of op over exactly conc goroutines.
func runConc(b *testing.B, conc int, op func(ctx context.Context, id string) error) {
	ids := NewIDs("b")
	ctx := context.Background()
	for range 2 * conc { // connect and warm up
		if err := op(ctx, ids.Next()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	n := int64(b.N)
	for range conc {
		wg.Go(func() {
			for next.Add(1) <= n {
				if err := op(ctx, ids.Next()); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if err, ok := failed.Load().(error); ok {
		b.Fatal(err)
	}
}

// BenchmarkSend is one synchronous send per op, for every fast-path
// contender, at 1 and 64 concurrent callers.
func BenchmarkSend(b *testing.B) {
	addr := brokerAddr(b)
	for _, conc := range concurrencies {
		for _, name := range FastPath {
			b.Run("contender="+name+"/conc="+strconv.Itoa(conc), func(b *testing.B) {
				s, err := New(name, addr, Settings{})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				runConc(b, conc, func(ctx context.Context, id string) error { return s.Send(ctx, id, smallBody) })
			})
		}
	}
}

// BenchmarkPaired measures each contender against the raw client in
// alternating batches of 128 sends, so that the load of other processes
// hits both alike: ns/op is the contender's, raw-ns/op the raw client's in
// the batches between, and x-raw the median over batch pairs of the
// contender's time over the raw client's (1.05 = 5% slower). cpu-ns/op,
// raw-cpu-ns/op and x-raw-cpu are the same with the process's CPU time
// (user + system, broker included), which other processes on the machine
// disturb far less than wall time. allocs/op here counts
// both; see BenchmarkSend for allocations. With
// ROCKETRY_BENCH_BASE=raw-timeout the baseline ("raw" in the metrics'
// names) is the raw client with the same 3 s per-call timeout as
// rocketry's attempts.
func BenchmarkPaired(b *testing.B) {
	addr := brokerAddr(b)
	base := cmp.Or(os.Getenv("ROCKETRY_BENCH_BASE"), Raw)
	raw, err := New(base, addr, Settings{})
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	for _, conc := range concurrencies {
		for _, name := range FastPath[1:] {
			if name == base {
				continue
			}
			b.Run("contender="+name+"/conc="+strconv.Itoa(conc), func(b *testing.B) {
				s, err := New(name, addr, Settings{})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				ids := NewIDs("p")
				opA := func(ctx context.Context) error { return s.Send(ctx, ids.Next(), smallBody) }
				opB := func(ctx context.Context) error { return raw.Send(ctx, ids.Next(), smallBody) }
				for range 4 * conc { // connect and warm up
					if err := opA(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
				paired.Run(b, conc, "raw", opA, opB)
			})
		}
	}
}

// asyncConcurrencies are the in-flight limits of BenchmarkAsync: rocketry's
// MaxInFlight, and the raw client's number of concurrent calls.
var asyncConcurrencies = []int{64, 1024}

// BenchmarkAsync is throughput with 1 KiB bodies: rocketry's SendAsync with
// MaxInFlight=C against the raw client with C goroutines each calling
// SendMessage in a loop. It reports msgs/s.
func BenchmarkAsync(b *testing.B) {
	addr := brokerAddr(b)
	body := make([]byte, 1024)
	for _, conc := range asyncConcurrencies {
		b.Run("contender=raw/conc="+strconv.Itoa(conc), func(b *testing.B) {
			s, err := New(Raw, addr, Settings{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			start := time.Now()
			runConc(b, conc, func(ctx context.Context, id string) error { return s.Send(ctx, id, body) })
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
		})
		b.Run("contender=rocketry/conc="+strconv.Itoa(conc), func(b *testing.B) {
			p, err := producer.New(addr, producer.WithProtocol(producer.RocketryV1), producer.WithMaxInFlight(conc))
			if err != nil {
				b.Fatal(err)
			}
			ids := NewIDs("a")
			if _, err := p.Send(context.Background(), &producer.Message{ID: ids.Next(), Topic: "bench", Body: body}); err != nil {
				b.Fatal(err)
			}
			var failed atomic.Int64
			cb := func(_ *producer.SendReceipt, err error) {
				if err != nil {
					failed.Add(1)
				}
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				if err := p.SendAsync(ctx, &producer.Message{ID: ids.Next(), Topic: "bench", Body: body}, cb); err != nil {
					b.Fatal(err)
				}
			}
			if err := p.Close(ctx); err != nil { // waits for every send
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d async sends failed", n)
			}
		})
	}
}

// BenchmarkAsyncPaired is BenchmarkAsync in alternating batches of 1024
// messages (1 KiB bodies): rocketry's SendAsync with MaxInFlight=C (the
// batch ends when every callback ran) against C goroutines calling the raw
// client. It reports both throughputs over the whole run and
// throughput-x-raw, the median over batch pairs of rocketry's throughput
// over the raw client's (0.9 = 90%).
func BenchmarkAsyncPaired(b *testing.B) {
	addr := brokerAddr(b)
	body := make([]byte, 1024)
	raw, err := New(Raw, addr, Settings{})
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	for _, conc := range asyncConcurrencies {
		b.Run("conc="+strconv.Itoa(conc), func(b *testing.B) {
			p, err := producer.New(addr, producer.WithProtocol(producer.RocketryV1), producer.WithMaxInFlight(conc))
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(context.Background())
			ids := NewIDs("ap")
			ctx := context.Background()
			var failed atomic.Int64
			async := func(n int) time.Duration {
				var wg sync.WaitGroup
				wg.Add(n)
				cb := func(_ *producer.SendReceipt, err error) {
					if err != nil {
						failed.Add(1)
					}
					wg.Done()
				}
				start := time.Now()
				for range n {
					if err := p.SendAsync(ctx, &producer.Message{ID: ids.Next(), Topic: "bench", Body: body}, cb); err != nil {
						b.Fatal(err)
					}
				}
				wg.Wait()
				return time.Since(start)
			}
			rawOp := func(ctx context.Context) error { return raw.Send(ctx, ids.Next(), body) }
			async(conc) // warm up
			const batch = 1024
			var tA, tB time.Duration
			var ratios []float64
			b.ResetTimer()
			for done, i := 0, 0; done < b.N; done, i = done+batch, i+1 {
				n := min(batch, b.N-done)
				var a, r time.Duration
				if i%2 == 0 {
					r, _ = paired.Batch(b, conc, n, rawOp)
					a = async(n)
				} else {
					a = async(n)
					r, _ = paired.Batch(b, conc, n, rawOp)
				}
				tA, tB = tA+a, tB+r
				ratios = append(ratios, float64(r)/float64(a))
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/tA.Seconds(), "msgs/s")
			b.ReportMetric(float64(b.N)/tB.Seconds(), "raw-msgs/s")
			b.ReportMetric(paired.Median(ratios), "throughput-x-raw")
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d async sends failed", n)
			}
		})
	}
}
