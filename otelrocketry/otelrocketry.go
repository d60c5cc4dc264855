package otelrocketry

import (
	"errors"
	"fmt"

	"github.com/rocketry-go/rocketry/producer"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the meter and tracer: the
// module's import path.
const ScopeName = "github.com/rocketry-go/rocketry/otelrocketry"

// Version is the instrumentation scope's version.
const Version = "0.1.0"

// Telemetry records the metrics and spans of every send of the Producers it
// is given to (Telemetry.Option); it is a producer.Hook. One Telemetry may
// serve many Producers. It is safe for concurrent use.
type Telemetry struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	inst       instruments
	sets       setCache
}

var _ producer.Hook = (*Telemetry)(nil)

// An Option configures New.
type Option func(*config)

type config struct {
	mp         metric.MeterProvider
	tp         trace.TracerProvider
	propagator propagation.TextMapPropagator
	errs       []error
}

// WithMeterProvider sets the MeterProvider the metrics are recorded with,
// overriding the default of the global one (otel.GetMeterProvider). mp
// must not be nil.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return notNil("WithMeterProvider", mp == nil, func(c *config) { c.mp = mp })
}

// WithTracerProvider sets the TracerProvider the spans are started with,
// overriding the default of the global one (otel.GetTracerProvider). tp
// must not be nil.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return notNil("WithTracerProvider", tp == nil, func(c *config) { c.tp = tp })
}

// WithPropagator sets the propagator that injects each send's span context
// into its message's properties, overriding the default of W3C Trace
// Context (propagation.TraceContext: the traceparent and tracestate
// properties; over RocketMQ 5, traceparent also goes to the message's
// trace_context). Give otel.GetTextMapPropagator() to use the global one.
// p must not be nil.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return notNil("WithPropagator", p == nil, func(c *config) { c.propagator = p })
}

// notNil is the option that applies set, or, when its argument is nil, an
// error naming it.
func notNil(name string, isNil bool, set func(*config)) Option {
	return func(c *config) {
		if isNil {
			c.errs = append(c.errs, fmt.Errorf("otelrocketry: %s(nil): must not be nil", name))
			return
		}
		set(c)
	}
}

// New returns a Telemetry configured by opts; an error names an invalid
// option, or the instrument the MeterProvider refused.
func New(opts ...Option) (*Telemetry, error) {
	c := config{propagator: propagation.TraceContext{}}
	for _, o := range opts {
		o(&c)
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	t := &Telemetry{
		tracer:     c.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version)),
		propagator: c.propagator,
	}
	if err := t.inst.init(c.mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version))); err != nil {
		return nil, fmt.Errorf("otelrocketry: New: %w", err)
	}
	return t, nil
}

// Option returns the producer option that plugs t into a Producer:
// producer.WithHook(t).
func (t *Telemetry) Option() producer.Option { return producer.WithHook(t) }
