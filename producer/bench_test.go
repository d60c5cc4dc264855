package producer

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/producer/internal/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

// The fast path, against the bundled broker on loopback in this process:
//
//	go test -run '^$' -bench . -benchmem ./producer/
//
// Every benchmark sends one 100-byte message per operation, with a fresh
// message ID, building what a user would build per send.

var benchBody = make([]byte, 100)

func benchConn(b *testing.B, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	b.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cc.Close() })
	return cc
}

// run runs op serially, or over b.RunParallel when parallel.
func benchRun(b *testing.B, parallel bool, op func(ctx context.Context) error) {
	ctx := context.Background()
	if err := op(ctx); err != nil { // connect first
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	if !parallel {
		for b.Loop() {
			if err := op(ctx); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := op(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func rawSend(client rocketryv1.MessagingServiceClient, ids *wire.IDGen, timeout time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		_, err := client.SendMessage(ctx, &rocketryv1.SendMessageRequest{Messages: []*rocketryv1.Message{{MessageId: ids.Next(), Topic: "bench", Body: benchBody}}})
		return err
	}
}

func forBoth(b *testing.B, f func(b *testing.B, parallel bool)) {
	b.Run("serial", func(b *testing.B) { f(b, false) })
	b.Run("parallel", func(b *testing.B) { f(b, true) })
}

// BenchmarkRawClient is the floor: the generated client, without (the
// floor) and with a per-call timeout (what careful code adds).
func BenchmarkRawClient(b *testing.B) {
	br := brokertest.Start(b)
	client := rocketryv1.NewMessagingServiceClient(benchConn(b, br.Addr()))
	b.Run("no-timeout", func(b *testing.B) {
		forBoth(b, func(b *testing.B, par bool) { benchRun(b, par, rawSend(client, wire.NewIDGen(), 0)) })
	})
	b.Run("timeout", func(b *testing.B) {
		forBoth(b, func(b *testing.B, par bool) {
			benchRun(b, par, rawSend(client, wire.NewIDGen(), DefaultAttemptTimeout))
		})
	})
}

// BenchmarkSend is Producer.Send with its defaults (3 attempts, 3 s per
// attempt).
func BenchmarkSend(b *testing.B) {
	br := brokertest.Start(b)
	p, err := New(br.Addr(), WithProtocol(RocketryV1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close(context.Background()) })
	forBoth(b, func(b *testing.B, par bool) {
		benchRun(b, par, func(ctx context.Context) error {
			_, err := p.Send(ctx, &Message{Topic: "bench", Body: benchBody})
			return err
		})
	})
}

// BenchmarkInterceptor is the generated client with rocketry's interceptor
// (defaults) against the same client with go-grpc-middleware's retry
// interceptor (3 attempts, 3 s per attempt, retrying UNAVAILABLE and
// RESOURCE_EXHAUSTED).
func BenchmarkInterceptor(b *testing.B) {
	br := brokertest.Start(b)
	b.Run("rocketry", func(b *testing.B) {
		client := rocketryv1.NewMessagingServiceClient(benchConn(b, br.Addr(), grpc.WithUnaryInterceptor(UnaryClientInterceptor())))
		forBoth(b, func(b *testing.B, par bool) { benchRun(b, par, rawSend(client, wire.NewIDGen(), 0)) })
	})
	b.Run("middleware", func(b *testing.B) {
		ic := retry.UnaryClientInterceptor(retry.WithMax(3), retry.WithPerRetryTimeout(DefaultAttemptTimeout),
			retry.WithCodes(codes.Unavailable, codes.ResourceExhausted))
		client := rocketryv1.NewMessagingServiceClient(benchConn(b, br.Addr(), grpc.WithUnaryInterceptor(ic)))
		forBoth(b, func(b *testing.B, par bool) { benchRun(b, par, rawSend(client, wire.NewIDGen(), 0)) })
	})
}

// BenchmarkSendAsync is SendAsync's throughput, with 1 KiB bodies and the
// default MaxInFlight.
func BenchmarkSendAsync(b *testing.B) {
	br := brokertest.Start(b)
	p, err := New(br.Addr(), WithProtocol(RocketryV1))
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 1024)
	b.ReportAllocs()
	for b.Loop() {
		if err := p.SendAsync(context.Background(), &Message{Topic: "bench", Body: body}, func(_ *SendReceipt, err error) {
			if err != nil {
				b.Error(err)
			}
		}); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// nopConn answers every SendMessage at once, without a network: it isolates
// the producer's own cost per send.
type nopConn struct{}

func (nopConn) Invoke(_ context.Context, _ string, args, reply any, _ ...grpc.CallOption) error {
	req := args.(*rocketryv1.SendMessageRequest)
	resp := reply.(*rocketryv1.SendMessageResponse)
	resp.Results = append(resp.Results[:0], &rocketryv1.SendResult{MessageId: req.GetMessages()[0].GetMessageId()})
	return nil
}

func (nopConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	panic("not used")
}

// BenchmarkOverhead is the producer's own cost per send, on a connection
// that answers at once: "raw" builds the request and calls the generated
// client, "send" is Producer.Send with its defaults (its attempt's
// deadline context included), "send-deadline" Send under a caller deadline
// sooner than the attempt timeout (no deadline of its own).
func BenchmarkOverhead(b *testing.B) {
	ids := wire.NewIDGen()
	client := rocketryv1.NewMessagingServiceClient(nopConn{})
	b.Run("raw", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			req := &rocketryv1.SendMessageRequest{Messages: []*rocketryv1.Message{{MessageId: ids.Next(), Topic: "bench", Body: benchBody}}}
			if _, err := client.SendMessage(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
	p, err := NewFromConn(nopConn{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(context.Background())
	b.Run("send", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := p.Send(context.Background(), &Message{Topic: "bench", Body: benchBody}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("send-deadline", func(b *testing.B) {
		b.ReportAllocs()
		// A deadline of 1 s, made afresh every 4096 sends (a run of the
		// benchmark outlives any one deadline), so its cost is amortized.
		deadlined := func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Second)
		}
		ctx, cancel := deadlined()
		n := 0
		for b.Loop() {
			if n++; n%4096 == 0 {
				cancel()
				ctx, cancel = deadlined()
			}
			if _, err := p.Send(ctx, &Message{Topic: "bench", Body: benchBody}); err != nil {
				cancel()
				b.Fatal(err)
			}
		}
		cancel()
	})
}

// BenchmarkAsyncBatchPaired is SendAsync with batching (the default
// WithBatching) against the raw generated client sending one message per
// RPC, at equal concurrency (MaxInFlight = the raw client's goroutines),
// with 1 KiB bodies, against the bundled broker in this process. The two
// run in alternating rounds of 4096 messages (16 times the concurrency
// when more), so that both see the same machine; x-raw is the median of
// the rounds' throughput ratios. A send's
// latency is from the SendAsync call to its callback (a wait for a free
// slot included), and from the call to its return for the raw client.
// rpcs/msg is the broker's SendMessage requests per async message.
// x-raw-timeout is the same ratio against the raw client giving each call
// DefaultAttemptTimeout, as the producer gives each attempt (a round of it
// follows each async round).
// batching=on gives WithBatching its defaults (over RocketMQ5 batching is
// off unless asked for); batching=off is the same SendAsync with
// WithBatching(0, 0, 0), for comparison.
//
//	go test -run '^$' -bench AsyncBatchPaired -benchtime 200000x ./producer/
func BenchmarkAsyncBatchPaired(b *testing.B) {
	for _, proto := range []Protocol{RocketryV1, RocketMQ5} {
		for _, conc := range []int{64, 1024} {
			for _, on := range []bool{true, false} {
				name := fmt.Sprintf("proto=%v/conc=%d/batching=on", proto, conc)
				opts := []Option{WithBatching(DefaultBatchLinger, DefaultBatchMessages, DefaultBatchBytes)} // RocketMQ5's default is off
				if !on {
					name = fmt.Sprintf("proto=%v/conc=%d/batching=off", proto, conc)
					opts = append(opts, WithBatching(0, 0, 0))
				}
				b.Run(name, func(b *testing.B) {
					benchAsyncBatchPaired(b, proto, conc, opts...)
				})
			}
		}
	}
}

func benchAsyncBatchPaired(b *testing.B, proto Protocol, conc int, opts ...Option) {
	br := brokertest.Start(b)
	p, err := New(br.Addr(), append([]Option{WithProtocol(proto), WithMaxInFlight(conc)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(context.Background())
	cc := benchConn(b, br.Addr())
	body := make([]byte, 1024)
	ids := wire.NewIDGen()
	var raw func(ctx context.Context) error
	switch proto {
	case RocketryV1:
		client := rocketryv1.NewMessagingServiceClient(cc)
		raw = func(ctx context.Context) error {
			_, err := client.SendMessage(ctx, &rocketryv1.SendMessageRequest{Messages: []*rocketryv1.Message{{MessageId: ids.Next(), Topic: "bench", Body: body}}})
			return err
		}
	default:
		client := rocketmqv2.NewMessagingServiceClient(cc)
		raw = func(ctx context.Context) error {
			r, err := client.SendMessage(ctx, &rocketmqv2.SendMessageRequest{Messages: []*rocketmqv2.Message{{
				Topic:            &rocketmqv2.Resource{Name: "bench"},
				SystemProperties: &rocketmqv2.SystemProperties{MessageId: ids.Next(), BodyEncoding: rocketmqv2.Encoding_IDENTITY, MessageType: rocketmqv2.MessageType_NORMAL},
				Body:             body,
			}}})
			if err == nil && r.GetStatus().GetCode() != rocketmqv2.Code_OK {
				err = fmt.Errorf("raw: %v", r.GetStatus())
			}
			return err
		}
	}
	ctx := context.Background()
	var failed atomic.Int64
	async := func(lat []time.Duration) time.Duration {
		var wg sync.WaitGroup
		wg.Add(len(lat))
		start := time.Now()
		for i := range lat {
			t0 := time.Now()
			if err := p.SendAsync(ctx, &Message{Topic: "bench", Body: body}, func(_ *SendReceipt, err error) {
				lat[i] = time.Since(t0)
				if err != nil {
					failed.Add(1)
				}
				wg.Done()
			}); err != nil {
				b.Fatal(err)
			}
		}
		wg.Wait()
		return time.Since(start)
	}
	rawTimeout := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, DefaultAttemptTimeout)
		defer cancel()
		return raw(ctx)
	}
	rawRoundOf := func(raw func(context.Context) error, lat []time.Duration) time.Duration {
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range min(conc, len(lat)) {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= int64(len(lat)) {
						return
					}
					t0 := time.Now()
					if err := raw(ctx); err != nil {
						b.Error(err)
						return
					}
					lat[i] = time.Since(t0)
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	rawRound := func(lat []time.Duration) time.Duration { return rawRoundOf(raw, lat) }
	warm := make([]time.Duration, conc)
	async(warm)
	rawRound(warm)
	rawRoundOf(rawTimeout, warm)

	round := max(4096, 16*conc) // long enough that filling and draining the pipeline is a small part
	latA := make([]time.Duration, b.N)
	latR := make([]time.Duration, b.N)
	var tA, tR time.Duration
	var ratios, ratiosT []float64
	latT := make([]time.Duration, round)
	req0 := br.Stats().GetSendRequests()
	var rawReqs int64
	b.ResetTimer()
	for done, i := 0, 0; done < b.N; done, i = done+round, i+1 {
		n := min(round, b.N-done)
		var a, r time.Duration
		if i%2 == 0 {
			before := br.Stats().GetSendRequests()
			r = rawRound(latR[done : done+n])
			rawReqs += br.Stats().GetSendRequests() - before
			a = async(latA[done : done+n])
		} else {
			a = async(latA[done : done+n])
			before := br.Stats().GetSendRequests()
			r = rawRound(latR[done : done+n])
			rawReqs += br.Stats().GetSendRequests() - before
		}
		tA, tR = tA+a, tR+r
		ratios = append(ratios, float64(r)/float64(a))
		before := br.Stats().GetSendRequests()
		ratiosT = append(ratiosT, float64(rawRoundOf(rawTimeout, latT[:n]))/float64(a))
		rawReqs += br.Stats().GetSendRequests() - before
	}
	b.StopTimer()
	asyncReqs := br.Stats().GetSendRequests() - req0 - rawReqs
	slices.Sort(ratios)
	slices.Sort(ratiosT)
	slices.Sort(latA)
	slices.Sort(latR)
	p99 := func(l []time.Duration) float64 { return float64(l[len(l)*99/100]) / float64(time.Millisecond) }
	b.ReportMetric(float64(b.N)/tA.Seconds(), "msgs/s")
	b.ReportMetric(float64(b.N)/tR.Seconds(), "raw-msgs/s")
	b.ReportMetric(ratios[len(ratios)/2], "x-raw")
	b.ReportMetric(ratiosT[len(ratiosT)/2], "x-raw-timeout")
	b.ReportMetric(p99(latA), "p99-ms")
	b.ReportMetric(p99(latR), "raw-p99-ms")
	b.ReportMetric(float64(asyncReqs)/float64(b.N), "rpcs/msg")
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d async sends failed", n)
	}
}
