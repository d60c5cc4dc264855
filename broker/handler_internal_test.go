package broker

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/status"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// BenchmarkSendMessageHandler measures the SendMessage handler alone (no
// gRPC), one message per call, from parallel goroutines on one topic.
func BenchmarkSendMessageHandler(b *testing.B) {
	br, err := New()
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = "id-" + strconv.Itoa(i)
	}
	body := make([]byte, 100)
	var next atomicCounter
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.add()
			req := &rocketryv1.SendMessageRequest{Messages: []*rocketryv1.Message{{Topic: "bench", MessageId: ids[i], Body: body}}}
			if _, err := (messagingServer{b: br}).SendMessage(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func TestRecoveredPanicHasErrorDetail(t *testing.T) {
	br, err := New()
	if err != nil {
		t.Fatal(err)
	}
	st := status.Convert(br.recovered(context.Background(), "boom"))
	d, ok := st.Details()[0].(*rocketryv1.ErrorDetail)
	if !ok || d.Code != rocketryv1.Code_CODE_INTERNAL_ERROR || st.Code().String() != "Internal" {
		t.Errorf("recovered(boom) = %v %v; want INTERNAL with a 500 ErrorDetail", st, st.Details())
	}
}

type atomicCounter struct{ n atomic.Int64 }

func (c *atomicCounter) add() int64 { return c.n.Add(1) - 1 }
