package otelrocketry_test

import (
	"context"
	"fmt"
	"log"
	"slices"
	"strings"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/broker"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/otelrocketry"
	"github.com/rocketry-go/rocketry/producer"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// A send that the broker throttled once, for BACKLOG, and then stored: its
// metrics, read with the SDK's ManualReader, and its span's events, with
// the in-memory exporter. Durations vary from run to run: the histograms
// show their counts, and the attributes every point has in common
// (messaging.system, messaging.destination.name, messaging.operation.*,
// server.*) are left out.
func Example() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	tel, err := otelrocketry.New(otelrocketry.WithMeterProvider(mp), otelrocketry.WithTracerProvider(tp))
	if err != nil {
		log.Fatal(err)
	}

	// The test broker throttles a topic whose backlog is over 1 and lifts
	// the throttle once it has refused a send; the "billing" group has
	// read one of the topic's two messages without committing it.
	var b *broker.Broker
	b, err = broker.New(broker.WithQueues(1),
		broker.WithThrottle(broker.Throttle{MaxBacklog: 1, BacklogLowWater: 1, StorageLoadWindow: 20 * time.Millisecond}),
		broker.WithSendObserver(func(r broker.SendRecord) {
			if r.Result == broker.SendThrottled {
				_ = b.SetThrottle(broker.Throttle{})
			}
		}))
	if err != nil {
		log.Fatal(err)
	}
	if err := b.Start("127.0.0.1:0"); err != nil {
		log.Fatal(err)
	}
	defer b.Stop()
	lagBehind(b.Addr(), "orders", "billing")

	p, err := producer.New(b.Addr(), tel.Option(),
		producer.WithThrottleSchedule(backoff.Constant(10*time.Millisecond)))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(context.Background())
	r, err := p.Send(context.Background(), &producer.Message{Topic: "orders", Body: []byte("paid")})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("stored after", r.Attempts, "attempts")

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, line := range summary(rm) {
		fmt.Println(line)
	}
	for _, s := range spans.GetSpans() {
		var events []string
		for _, e := range s.Events {
			events = append(events, e.Name)
		}
		fmt.Printf("span %q (%v): %s\n", s.Name, s.SpanKind, strings.Join(events, ", "))
	}
	// Output:
	// stored after 2 attempts
	// messaging.client.operation.duration (s): 1 send
	// messaging.client.sent.messages ({message}): 1
	// rocketry.client.active_sends ({send}): 0
	// rocketry.client.retries ({retry}) rocketry.retry.why=throttled: 1
	// rocketry.client.retry.delay (s) rocketry.retry.why=throttled: 1 retry
	// rocketry.client.send.attempts ({attempt}): 1 send, 2 attempts
	// rocketry.client.throttles ({attempt}) rocketry.throttle.reason=BACKLOG: 1
	// span "send orders" (producer): attempt, throttle, retry, attempt
}

// lagBehind stores two messages in topic and has group read one of them
// without committing it: a backlog of 2.
func lagBehind(addr, topic, group string) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	if _, err := rocketryv1.NewMessagingServiceClient(conn).SendMessage(ctx, &rocketryv1.SendMessageRequest{
		Messages: []*rocketryv1.Message{{Topic: topic, MessageId: "a"}, {Topic: topic, MessageId: "b"}},
	}); err != nil {
		log.Fatal(err)
	}
	if _, err := rocketryv1.NewConsumerServiceClient(conn).ReceiveMessages(ctx, &rocketryv1.ReceiveMessagesRequest{
		Topic: topic, Group: group, MaxMessages: 1,
	}); err != nil {
		log.Fatal(err)
	}
}

// summary is one line per data point: the metric, its unit, the
// attributes rocketry adds, and its value (a histogram's count).
func summary(rm metricdata.ResourceMetrics) []string {
	var out []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			head := m.Name + " (" + m.Unit + ")"
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out = append(out, fmt.Sprintf("%s%s: %d", head, own(p.Attributes), p.Value))
				}
			case metricdata.Histogram[int64]: // attempts per send
				for _, p := range d.DataPoints {
					out = append(out, fmt.Sprintf("%s%s: %d send, %d attempts", head, own(p.Attributes), p.Count, p.Sum))
				}
			case metricdata.Histogram[float64]:
				what := "send"
				if m.Name == otelrocketry.MetricRetryDelay {
					what = "retry"
				}
				for _, p := range d.DataPoints {
					out = append(out, fmt.Sprintf("%s%s: %d %s", head, own(p.Attributes), p.Count, what))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// own renders the attributes of rocketry's own keys, and error.type.
func own(s attribute.Set) string {
	var b strings.Builder
	for _, kv := range s.ToSlice() {
		if strings.HasPrefix(string(kv.Key), "rocketry.") || kv.Key == "error.type" {
			b.WriteString(" " + string(kv.Key) + "=" + kv.Value.String())
		}
	}
	return b.String()
}
