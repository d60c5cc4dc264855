package otelrocketry_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/rocketry-go/rocketry/otelrocketry"
	"github.com/rocketry-go/rocketry/producer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// lateProvider is a MeterProvider whose up-down counters are disabled
// until on is set, as the global MeterProvider's instruments are until
// otel.SetMeterProvider installs the SDK.
type lateProvider struct {
	metric.MeterProvider
	on *atomic.Bool
}

func (p lateProvider) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	return lateMeter{p.MeterProvider.Meter(name, opts...), p.on}
}

type lateMeter struct {
	metric.Meter
	on *atomic.Bool
}

func (m lateMeter) Int64UpDownCounter(name string, opts ...metric.Int64UpDownCounterOption) (metric.Int64UpDownCounter, error) {
	c, err := m.Meter.Int64UpDownCounter(name, opts...)
	return lateUpDownCounter{c, m.on}, err
}

type lateUpDownCounter struct {
	metric.Int64UpDownCounter
	on *atomic.Bool
}

func (c lateUpDownCounter) Enabled(ctx context.Context) bool {
	return c.on.Load() && c.Int64UpDownCounter.Enabled(ctx)
}

func (c lateUpDownCounter) Add(ctx context.Context, v int64, opts ...metric.AddOption) {
	if c.on.Load() {
		c.Int64UpDownCounter.Add(ctx, v, opts...)
	}
}

// TestActiveSendsWhenEnabledLate: a send that started while
// rocketry.client.active_sends was not enabled, and ended once it was, is
// not uncounted: sends in flight never go below zero. Regression: EndSend
// took one off for a send StartSend had not counted, and the gauge stayed
// at -1.
func TestActiveSendsWhenEnabledLate(t *testing.T) {
	b := brokertest.Start(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	var on atomic.Bool
	tel, err := otelrocketry.New(otelrocketry.WithMeterProvider(lateProvider{mp, &on}))
	require.NoError(t, err)
	p, err := producer.New(b.Addr(), producer.WithProtocol(producer.RocketryV1), tel.Option(),
		producer.WithObserver(func(producer.Event) { on.Store(true) })) // enabled during the first send
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(context.Background()) })

	for range 2 { // the second starts and ends enabled
		_, err = p.Send(context.Background(), &producer.Message{Topic: "orders", Body: []byte("x")})
		require.NoError(t, err)
	}
	r := &rig{reader: reader}
	var active []string
	for _, l := range r.metrics(t) {
		if strings.HasPrefix(l, otelrocketry.MetricActiveSends+" ") {
			active = append(active, l)
		}
	}
	assert.Equal(t, []string{"rocketry.client.active_sends {send} updowncounter {" + dest + sys + "} 0"}, active)
}

// panicPropagator panics in Inject while armed.
type panicPropagator struct {
	propagation.TraceContext
	armed *atomic.Bool
}

func (p panicPropagator) Inject(ctx context.Context, c propagation.TextMapCarrier) {
	if p.armed.Load() {
		panic("propagator")
	}
	p.TraceContext.Inject(ctx, c)
}

// TestPanicInStartSend: a propagator that panics in StartSend (after the
// span started) unwinds the caller's Send, and the producer calls no
// EndSend for it: the span is ended all the same, with status Error, and
// the send is not left counted in flight. Regression: the span was never
// ended and rocketry.client.active_sends stayed at 1.
func TestPanicInStartSend(t *testing.T) {
	b := brokertest.Start(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	var armed atomic.Bool
	armed.Store(true)
	tel, err := otelrocketry.New(otelrocketry.WithMeterProvider(mp), otelrocketry.WithTracerProvider(tp),
		otelrocketry.WithPropagator(panicPropagator{armed: &armed}))
	require.NoError(t, err)
	p, err := producer.New(b.Addr(), producer.WithProtocol(producer.RocketryV1), tel.Option())
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(context.Background()) })

	send := func() (v any) {
		defer func() { v = recover() }()
		_, _ = p.Send(context.Background(), &producer.Message{Topic: "orders", Body: []byte("x")})
		return nil
	}
	require.Equal(t, "propagator", send())
	require.Len(t, spans.Started(), 1)
	require.Len(t, spans.Ended(), 1, "the span of the unwound send is ended")
	assert.Equal(t, codes.Error, spans.Ended()[0].Status().Code)

	armed.Store(false)
	require.Nil(t, send())
	r := &rig{reader: reader}
	assert.Contains(t, r.metrics(t), "rocketry.client.active_sends {send} updowncounter {"+dest+sys+"} 0")
	assert.Len(t, spans.Ended(), 2)
}

// TestGroupFailedErrorType: a FIFO message that fails because an earlier
// message of its group failed has error.type group_failed, not the
// earlier one's reason, which its error wraps. Regression: the second
// message of a group whose first was cancelled read canceled, though its
// own context was not.
func TestGroupFailedErrorType(t *testing.T) {
	b := brokertest.Start(t, broker.WithFaults(broker.Faults{BlackholeRate: 1}))
	r := newRig(t, b.Addr())
	first, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	cb := func(_ *producer.SendReceipt, err error) { done <- err }
	require.NoError(t, r.p.SendAsync(first, &producer.Message{Topic: "orders", MessageGroup: "g"}, cb))
	require.NoError(t, r.p.SendAsync(context.Background(), &producer.Message{Topic: "orders", MessageGroup: "g"}, cb))
	cancel() // the first is never answered: it fails canceled, the second behind it
	require.ErrorIs(t, <-done, context.Canceled)
	require.ErrorIs(t, <-done, producer.ErrGroupFailed)

	// The first may have made its attempt before it was cancelled (server.*);
	// the second made none.
	assert.Contains(t, r.metrics(t), "messaging.client.sent.messages {message} counter {error.type=group_failed,"+op+"} 1")
	var types []string
	for _, s := range r.spans.Ended() {
		types = append(types, attr(s.Attributes(), "error.type"))
	}
	assert.ElementsMatch(t, []string{"canceled", "group_failed"}, types)
}
