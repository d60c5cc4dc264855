package otelrocketry_test

import (
	"context"
	"strconv"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/rocketry-go/rocketry/internal/paired"
	"github.com/rocketry-go/rocketry/otelrocketry"
	"github.com/rocketry-go/rocketry/producer"
)

// The cost of the adapter on the fast path (a Send stored at once), against
// the bundled broker on loopback in this process:
//
//	cd otelrocketry && go test -run '^$' -bench . -benchmem -benchtime 6000x
//
// adapter=off is a Producer without it; adapter=noop has it with OpenTelemetry's
// no-op providers (the global ones when none is set up): the price of the
// hook itself; adapter=sdk has it with the SDK: a ManualReader's
// aggregation and every span sampled, batched to an exporter that drops
// them.

var body = make([]byte, 100)

// adapters makes the producer options of each variant.
func adapters(b *testing.B) map[string][]producer.Option {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	sdk, err := otelrocketry.New(otelrocketry.WithMeterProvider(mp), otelrocketry.WithTracerProvider(tp))
	if err != nil {
		b.Fatal(err)
	}
	noop, err := otelrocketry.New(otelrocketry.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelrocketry.WithTracerProvider(tracenoop.NewTracerProvider()))
	if err != nil {
		b.Fatal(err)
	}
	return map[string][]producer.Option{"off": nil, "noop": {noop.Option()}, "sdk": {sdk.Option()}}
}

func benchProducer(b *testing.B, addr string, opts []producer.Option) *producer.Producer {
	p, err := producer.New(addr, append([]producer.Option{producer.WithProtocol(producer.RocketryV1)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close(context.Background()) })
	for range 64 { // connect and warm up
		send(b, p)
	}
	return p
}

func send(b *testing.B, p *producer.Producer) {
	if _, err := p.Send(context.Background(), &producer.Message{Topic: "bench", Body: body}); err != nil {
		b.Error(err)
	}
}

// BenchmarkSend is one Send per op, for each variant, at one caller:
// allocs/op is the producer's and the broker's (same process), so compare
// the variants, not the figures.
func BenchmarkSend(b *testing.B) {
	br := brokertest.Start(b)
	for _, name := range []string{"off", "noop", "sdk"} {
		b.Run("adapter="+name, func(b *testing.B) {
			p := benchProducer(b, br.Addr(), adapters(b)[name])
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				send(b, p)
			}
		})
	}
}

// BenchmarkSendPaired runs each variant against adapter=off in alternating
// batches of 128 sends over conc callers, so that the load of other
// processes hits both alike: ns/op is the variant's, off-ns/op the bare
// producer's in the batches between, and x-off the median over batch pairs
// of the variant's time over the bare producer's (1.05 = 5% slower).
func BenchmarkSendPaired(b *testing.B) {
	br := brokertest.Start(b)
	for _, conc := range []int{1, 64} {
		for _, name := range []string{"noop", "sdk"} {
			b.Run("adapter="+name+"/conc="+strconv.Itoa(conc), func(b *testing.B) {
				ad := adapters(b)
				on, off := benchProducer(b, br.Addr(), ad[name]), benchProducer(b, br.Addr(), nil)
				paired.Run(b, conc, "off", sendOn(on), sendOn(off))
			})
		}
	}
}

// sendOn is one send of the benchmark's message on p.
func sendOn(p *producer.Producer) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := p.Send(ctx, &producer.Message{Topic: "bench", Body: body})
		return err
	}
}
