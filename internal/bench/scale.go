package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rocketry-go/rocketry/broker"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/producer"
)

// ScaleResult is the cost of n sends in flight at once against a broker
// that holds every call: goroutines and live heap (after a GC) over the
// baseline before the sends, in the whole process, so the broker's share
// of each call (its handler goroutine, its request) is in both contenders'
// figures and the difference is the client's.
type ScaleResult struct {
	Contender string `json:"contender"`
	InFlight  int    `json:"in_flight"`
	// Goroutines and HeapBytes are the growth over the baseline.
	Goroutines        int     `json:"goroutines"`
	GoroutinesPerSend float64 `json:"goroutines_per_send"`
	HeapBytes         uint64  `json:"heap_bytes"`
	HeapBytesPerSend  float64 `json:"heap_bytes_per_send"`
	// StackBytes is the growth of goroutine stacks (not in the heap).
	StackBytes        uint64  `json:"stack_bytes"`
	StackBytesPerSend float64 `json:"stack_bytes_per_send"`
	// QueueSeconds is how long it took to start the n sends.
	QueueSeconds float64 `json:"queue_seconds"`
}

// ScaleBodyBytes is the body of every message of MeasureScale.
const ScaleBodyBytes = 100

// MeasureScale starts n sends with contender name (Raw: one goroutine per
// call of the generated client; Rocketry: Producer.SendAsync with
// MaxInFlight n) against a broker that delays every answer by an hour, and
// measures goroutines and heap once the broker holds all n calls (one
// connection: the bundled broker sets no stream limit).
// Then it cancels them all (every send has one cancellable context) and
// waits for them.
func MeasureScale(ctx context.Context, name string, n int) (*ScaleResult, error) {
	b, err := broker.New(broker.WithFaults(broker.Faults{Latency: time.Hour}))
	if err != nil {
		return nil, err
	}
	if err := b.Start("127.0.0.1:0"); err != nil {
		return nil, err
	}
	defer b.Stop()

	// One connection, made before the baseline by a stats call, so that
	// its goroutines and buffers are not counted.
	cc, err := grpc.NewClient(b.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	if _, err := rocketryv1.NewConsumerServiceClient(cc).GetStats(ctx, &rocketryv1.GetStatsRequest{}); err != nil {
		return nil, err
	}
	var s Sender
	var p *producer.Producer
	switch name {
	case Raw:
		s = &rawSender{cc: cc, client: rocketryv1.NewMessagingServiceClient(cc), topic: "bench"}
	case Rocketry:
		// Batching off: the scale is of one call per queued send, as the
		// raw client makes (batched, n sends would be a few calls).
		p, err = producer.NewFromConn(cc, producer.WithMaxInFlight(n), producer.WithAttemptTimeout(2*time.Hour), producer.WithBatching(0, 0, 0))
		if err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("bench: MeasureScale: contender %q: want %q or %q", name, Raw, Rocketry)
	}
	body := make([]byte, ScaleBodyBytes)
	ids := NewIDs("scale")

	held := func() int64 { return b.Stats().GetFaults()["latency"] }
	base := held()
	g0, h0, s0 := liveNow()

	// Every send gets sendCtx, cancelled after the measurement to end them
	// all at once.
	sendCtx, cancelSends := context.WithCancel(context.Background())
	defer cancelSends()
	start := time.Now()
	var done sync.WaitGroup
	var finished atomic.Int64
	switch name {
	case Raw:
		for range n {
			id := ids.Next()
			done.Go(func() {
				_ = s.Send(sendCtx, id, body)
				finished.Add(1)
			})
		}
	case Rocketry:
		for range n {
			done.Add(1)
			if err := p.SendAsync(sendCtx, &producer.Message{ID: ids.Next(), Topic: "bench", Body: body}, func(*producer.SendReceipt, error) {
				finished.Add(1)
				done.Done()
			}); err != nil {
				done.Done()
				return nil, err
			}
		}
	}
	queued := time.Since(start)
	// Measure once the broker holds every call.
	deadline := time.Now().Add(3 * time.Minute)
	for held()-base < int64(n) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("bench: MeasureScale: the broker holds %d of %d calls after 3 minutes", held()-base, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	g1, h1, s1 := liveNow()
	cancelSends()
	done.Wait()
	if p != nil {
		_ = p.Close(context.Background())
	}
	r := &ScaleResult{Contender: name, InFlight: n, Goroutines: g1 - g0, QueueSeconds: queued.Seconds()}
	if h1 > h0 {
		r.HeapBytes = h1 - h0
	}
	if s1 > s0 {
		r.StackBytes = s1 - s0
	}
	r.StackBytesPerSend = float64(r.StackBytes) / float64(n)
	r.GoroutinesPerSend = float64(r.Goroutines) / float64(n)
	r.HeapBytesPerSend = float64(r.HeapBytes) / float64(n)
	return r, nil
}

// liveNow returns the goroutine count, the live heap after a GC and the
// goroutine stacks in use.
func liveNow() (int, uint64, uint64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return runtime.NumGoroutine(), m.HeapAlloc, m.StackInuse
}
