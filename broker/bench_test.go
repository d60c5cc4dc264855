package broker_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// BenchmarkStore stores b.N messages (100-byte bodies, 24-byte ids, in
// batches of 64) through a real client and reports the live heap the broker
// keeps per stored message, in bytes/msg: body, id, message struct, log
// slot and dedup entry.
func BenchmarkStore(b *testing.B) {
	br := brokertest.Start(b, broker.WithQueues(4))
	c := dial(b, br.Addr())
	body := make([]byte, 100)
	const batch = 64
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		req := &rocketryv1.SendMessageRequest{}
		for j := i; j < min(i+batch, b.N); j++ {
			req.Messages = append(req.Messages, &rocketryv1.Message{Topic: "bench", MessageId: fmt.Sprintf("message-%015d", j), Body: body})
		}
		if _, err := c.SendMessage(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	if got := br.Stats().Stored; got != int64(b.N) {
		b.Fatalf("stored %d; want %d", got, b.N)
	}
	b.ReportMetric(float64(int64(ms.HeapAlloc)-int64(before))/float64(b.N), "bytes/msg")
	runtime.KeepAlive(br)
}

// BenchmarkSendMessage measures SendMessage round trips of one message,
// from parallel clients, through real gRPC on loopback.
func BenchmarkSendMessage(b *testing.B) {
	br := brokertest.Start(b)
	c := dial(b, br.Addr())
	var n atomic.Int64
	body := make([]byte, 100)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := fmt.Sprintf("m-%d", n.Add(1))
			req := &rocketryv1.SendMessageRequest{Messages: []*rocketryv1.Message{{Topic: "bench", MessageId: id, Body: body}}}
			if _, err := c.SendMessage(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
