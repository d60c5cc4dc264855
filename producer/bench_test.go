package producer

import (
	"context"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
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

func rawSend(client rocketryv1.MessagingServiceClient, ids *idGen, timeout time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		_, err := client.SendMessage(ctx, &rocketryv1.SendMessageRequest{Messages: []*rocketryv1.Message{{MessageId: ids.next(), Topic: "bench", Body: benchBody}}})
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
		forBoth(b, func(b *testing.B, par bool) { benchRun(b, par, rawSend(client, newIDGen(), 0)) })
	})
	b.Run("timeout", func(b *testing.B) {
		forBoth(b, func(b *testing.B, par bool) { benchRun(b, par, rawSend(client, newIDGen(), DefaultAttemptTimeout)) })
	})
}

// BenchmarkSend is Producer.Send with its defaults (3 attempts, 3 s per
// attempt).
func BenchmarkSend(b *testing.B) {
	br := brokertest.Start(b)
	p, err := New(br.Addr())
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
		forBoth(b, func(b *testing.B, par bool) { benchRun(b, par, rawSend(client, newIDGen(), 0)) })
	})
	b.Run("middleware", func(b *testing.B) {
		ic := retry.UnaryClientInterceptor(retry.WithMax(3), retry.WithPerRetryTimeout(DefaultAttemptTimeout),
			retry.WithCodes(codes.Unavailable, codes.ResourceExhausted))
		client := rocketryv1.NewMessagingServiceClient(benchConn(b, br.Addr(), grpc.WithUnaryInterceptor(ic)))
		forBoth(b, func(b *testing.B, par bool) { benchRun(b, par, rawSend(client, newIDGen(), 0)) })
	})
}

// BenchmarkSendAsync is SendAsync's throughput, with 1 KiB bodies and the
// default MaxInFlight.
func BenchmarkSendAsync(b *testing.B) {
	br := brokertest.Start(b)
	p, err := New(br.Addr())
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
// client, "send" is Producer.Send with its defaults (its
// attempt watchdog included), "send-deadline" Send under a caller deadline
// sooner than the attempt timeout (no deadline of its own).
func BenchmarkOverhead(b *testing.B) {
	ids := newIDGen()
	client := rocketryv1.NewMessagingServiceClient(nopConn{})
	b.Run("raw", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			req := &rocketryv1.SendMessageRequest{Messages: []*rocketryv1.Message{{MessageId: ids.next(), Topic: "bench", Body: benchBody}}}
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	b.Run("send-deadline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := p.Send(ctx, &Message{Topic: "bench", Body: benchBody}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
