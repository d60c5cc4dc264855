package otelrocketry_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/otelrocketry"
	"github.com/rocketry-go/rocketry/producer"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// rig is a producer with a Telemetry whose metrics and spans stay in
// memory: the SDK's ManualReader and SpanRecorder.
type rig struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tel    *otelrocketry.Telemetry
	p      *producer.Producer
}

func newRig(t *testing.T, addr string, opts ...producer.Option) *rig {
	t.Helper()
	r := &rig{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	tel, err := otelrocketry.New(otelrocketry.WithMeterProvider(mp), otelrocketry.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	r.tel = tel
	r.p, err = producer.New(addr, append([]producer.Option{producer.WithProtocol(producer.RocketryV1), tel.Option(), producer.WithBatching(0, 0, 0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.p.Close(ctx)
	})
	return r
}

// metrics collects the metrics and renders each data point as one line,
//
//	name unit kind {attributes} value
//
// sorted: a counter's value is its sum; a histogram's is count=N, and
// sum=S unless the metric measures wall-clock time (the operation's
// duration, or a retry delay that a broker's hint lengthened by the time
// the attempt took), which the tests check apart.
func (r *rig) metrics(t *testing.T, wallClock ...string) []string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return render(rm, wallClock...)
}

func render(rm metricdata.ResourceMetrics, wallClock ...string) []string {
	var out []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			head := m.Name + " " + m.Unit + " "
			timed := m.Name == otelrocketry.MetricOperationDuration || slices.Contains(wallClock, m.Name)
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				kind := "updowncounter"
				if d.IsMonotonic {
					kind = "counter"
				}
				for _, p := range d.DataPoints {
					out = append(out, fmt.Sprintf("%s%s %s %d", head, kind, attrs(p.Attributes), p.Value))
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					out = append(out, fmt.Sprintf("%shistogram %s count=%d sum=%d", head, attrs(p.Attributes), p.Count, p.Sum))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if timed {
						out = append(out, fmt.Sprintf("%shistogram %s count=%d", head, attrs(p.Attributes), p.Count))
					} else {
						out = append(out, fmt.Sprintf("%shistogram %s count=%d sum=%g", head, attrs(p.Attributes), p.Count, p.Sum))
					}
				}
			default:
				out = append(out, fmt.Sprintf("%s%T", head, m.Data))
			}
		}
	}
	slices.Sort(out)
	return out
}

// attrs renders a set as {k=v,...}, sorted by key.
func attrs(s attribute.Set) string {
	var kv []string
	for _, a := range s.ToSlice() {
		kv = append(kv, string(a.Key)+"="+a.Value.String())
	}
	return "{" + strings.Join(kv, ",") + "}"
}

// throttleOnce makes the broker throttle the next send for BACKLOG and lift
// the throttle as soon as it has refused one: two messages are stored and a
// consumer group has read one without committing it (backlog 2, over 1).
// The BACKLOG hint is then the 20 ms window, nothing having drained.
func throttleOnce(t *testing.T) *broker.Broker {
	t.Helper()
	var bp atomic.Pointer[broker.Broker]
	var once sync.Once
	b := brokertest.Start(t, broker.WithQueues(1),
		broker.WithThrottle(broker.Throttle{MaxBacklog: 1, BacklogLowWater: 1, StorageLoadWindow: 20 * time.Millisecond}),
		broker.WithSendObserver(func(r broker.SendRecord) {
			if r.Result == broker.SendThrottled {
				once.Do(func() { _ = bp.Load().SetThrottle(broker.Throttle{}) })
			}
		}))
	bp.Store(b)
	conn, err := grpc.NewClient(b.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	if _, err := rocketryv1.NewMessagingServiceClient(conn).SendMessage(ctx, &rocketryv1.SendMessageRequest{Messages: []*rocketryv1.Message{
		{Topic: "orders", MessageId: "seed-1"}, {Topic: "orders", MessageId: "seed-2"},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := rocketryv1.NewConsumerServiceClient(conn).ReceiveMessages(ctx, &rocketryv1.ReceiveMessagesRequest{
		Topic: "orders", Group: "billing", MaxMessages: 1,
	}); err != nil {
		t.Fatal(err)
	}
	return b
}
