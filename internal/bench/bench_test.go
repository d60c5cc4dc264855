package bench

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/broker/brokertest"
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

var smallBody = make([]byte, 100)

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
	br := brokertest.Start(b)
	for _, conc := range concurrencies {
		for _, name := range FastPath {
			b.Run("contender="+name+"/conc="+strconv.Itoa(conc), func(b *testing.B) {
				s, err := New(name, br.Addr(), Settings{})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				runConc(b, conc, func(ctx context.Context, id string) error { return s.Send(ctx, id, smallBody) })
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
	br := brokertest.Start(b)
	body := make([]byte, 1024)
	for _, conc := range asyncConcurrencies {
		b.Run("contender=raw/conc="+strconv.Itoa(conc), func(b *testing.B) {
			s, err := New(Raw, br.Addr(), Settings{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			start := time.Now()
			runConc(b, conc, func(ctx context.Context, id string) error { return s.Send(ctx, id, body) })
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
		})
		b.Run("contender=rocketry/conc="+strconv.Itoa(conc), func(b *testing.B) {
			p, err := producer.New(br.Addr(), producer.WithMaxInFlight(conc))
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
