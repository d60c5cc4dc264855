package otelrocketry_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/rocketry-go/rocketry/otelrocketry"
	"github.com/rocketry-go/rocketry/producer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The attributes of the lines the tests expect; PORT is the broker's port.
const (
	dest   = "messaging.destination.name=orders,"
	sys    = "messaging.system=rocketry"
	op     = dest + "messaging.operation.name=send,messaging.operation.type=send," + sys
	server = ",server.address=127.0.0.1,server.port=PORT"
)

// wantLines replaces PORT with addr's port.
func wantLines(addr string, lines ...string) []string {
	_, port, _ := net.SplitHostPort(addr)
	for i, l := range lines {
		lines[i] = strings.ReplaceAll(l, "PORT", port)
	}
	return lines
}

// eventNames is the names of a span's events.
func eventNames(s sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, e := range s.Events() {
		out = append(out, e.Name)
	}
	return out
}

// attr is the value of key among kvs, rendered; "" if absent.
func attr(kvs []attribute.KeyValue, key attribute.Key) string {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value.String()
		}
	}
	return ""
}

// oneSpan is the only span ended, which must be a send's.
func oneSpan(t *testing.T, r *rig) sdktrace.ReadOnlySpan {
	t.Helper()
	ended := r.spans.Ended()
	require.Len(t, ended, 1)
	s := ended[0]
	assert.Equal(t, "send orders", s.Name())
	assert.Equal(t, trace.SpanKindProducer, s.SpanKind())
	return s
}

// TestThrottledOnce: a send throttled once (BACKLOG), then stored, in the
// metrics and in its span, whose context reaches the broker in the
// message's traceparent, as a child of the caller's span.
func TestThrottledOnce(t *testing.T) {
	b := throttleOnce(t)
	r := newRig(t, b.Addr(), producer.WithThrottleSchedule(backoff.Constant(5*time.Millisecond)))
	parent, span := sdktrace.NewTracerProvider().Tracer("test").Start(context.Background(), "caller")
	m := &producer.Message{Topic: "orders", Body: []byte("x")}
	rec, err := r.p.Send(parent, m)
	span.End()
	require.NoError(t, err)
	require.Equal(t, 2, rec.Attempts)

	assert.Equal(t, wantLines(b.Addr(),
		"messaging.client.operation.duration s histogram {"+op+server+"} count=1",
		"messaging.client.sent.messages {message} counter {"+op+server+"} 1",
		"rocketry.client.active_sends {send} updowncounter {"+dest+sys+"} 0",
		"rocketry.client.retries {retry} counter {"+dest+sys+",rocketry.retry.why=throttled"+server+"} 1",
		"rocketry.client.retry.delay s histogram {"+dest+sys+",rocketry.retry.why=throttled} count=1",
		"rocketry.client.send.attempts {attempt} histogram {"+dest+sys+"} count=1 sum=2",
		"rocketry.client.throttles {attempt} counter {"+dest+sys+",rocketry.throttle.reason=BACKLOG"+server+"} 1",
	), r.metrics(t, otelrocketry.MetricRetryDelay))

	s := oneSpan(t, r)
	assert.Equal(t, span.SpanContext().TraceID(), s.SpanContext().TraceID(), "the send's span is in the caller's trace")
	assert.Equal(t, span.SpanContext().SpanID(), s.Parent().SpanID())
	assert.Equal(t, codes.Unset, s.Status().Code)
	assert.Equal(t, "2", attr(s.Attributes(), otelrocketry.AttrAttempts))
	assert.Equal(t, m.ID, attr(s.Attributes(), "messaging.message.id"))
	assert.Equal(t, []string{"attempt", "throttle", "retry", "attempt"}, eventNames(s))
	ev := s.Events()
	assert.Equal(t, "1", attr(ev[0].Attributes, otelrocketry.AttrAttempt))
	assert.Equal(t, "127.0.0.1", attr(ev[0].Attributes, "server.address"))
	assert.Equal(t, "BACKLOG", attr(ev[1].Attributes, otelrocketry.AttrThrottleReason))
	assert.Equal(t, "TOO_MANY_REQUESTS", attr(ev[1].Attributes, otelrocketry.AttrCode))
	assert.Equal(t, "throttled", attr(ev[2].Attributes, otelrocketry.AttrRetryWhy))
	assert.Equal(t, "TOO_MANY_REQUESTS", attr(ev[2].Attributes, otelrocketry.AttrCode))
	var delay float64
	for _, kv := range ev[2].Attributes {
		if kv.Key == otelrocketry.AttrRetryDelay {
			delay = kv.Value.AsFloat64()
		}
	}
	assert.GreaterOrEqual(t, delay, 0.02, "the broker's 20 ms hint lengthens the 5 ms schedule")
	assert.Equal(t, "2", attr(ev[3].Attributes, otelrocketry.AttrAttempt))

	stored := b.Messages("orders")
	require.Len(t, stored, 3)
	want := fmt.Sprintf("00-%s-%s-01", s.SpanContext().TraceID(), s.SpanContext().SpanID())
	assert.Equal(t, want, stored[2].GetMessage().GetProperties()[producer.TraceParentProperty])
	assert.Nil(t, m.Properties, "the caller's message is not changed")
}

// withLine is lines and line, sorted.
func withLine(lines []string, line string) []string {
	out := append(slices.Clone(lines), line)
	slices.Sort(out)
	return out
}

// TestFailedSends: sends that fail for good, each in its metrics and span:
// refused as permanent, attempts exhausted, dead-lettered, stopped by the
// retry budget.
func TestFailedSends(t *testing.T) {
	const exhausted = "error.type=attempts_exhausted,"
	exhaustedLines := []string{
		"messaging.client.operation.duration s histogram {" + exhausted + op + server + "} count=1",
		"messaging.client.sent.messages {message} counter {" + exhausted + op + server + "} 1",
		"rocketry.client.active_sends {send} updowncounter {" + dest + sys + "} 0",
		"rocketry.client.retries {retry} counter {" + dest + sys + ",rocketry.retry.why=failed-not-stored" + server + "} 2",
		"rocketry.client.retry.delay s histogram {" + dest + sys + ",rocketry.retry.why=failed-not-stored} count=2 sum=0",
		"rocketry.client.send.attempts {attempt} histogram {" + exhausted + dest + sys + "} count=1 sum=3",
	}
	for _, tc := range []struct {
		name   string
		topics bool // the broker refuses unknown topics
		opts   []producer.Option
		lines  []string
		events []string
		code   string
	}{{
		name: "not retryable", topics: true,
		lines: []string{
			"messaging.client.operation.duration s histogram {error.type=not_retryable," + op + server + "} count=1",
			"messaging.client.sent.messages {message} counter {error.type=not_retryable," + op + server + "} 1",
			"rocketry.client.active_sends {send} updowncounter {" + dest + sys + "} 0",
			"rocketry.client.send.attempts {attempt} histogram {error.type=not_retryable," + dest + sys + "} count=1 sum=1",
		},
		events: []string{"attempt"},
		code:   "TOPIC_NOT_FOUND",
	}, {
		name:   "exhausted",
		lines:  exhaustedLines,
		events: []string{"attempt", "retry", "attempt", "retry", "attempt"},
		code:   "INTERNAL_ERROR",
	}, {
		name:   "dead-lettered",
		opts:   []producer.Option{producer.WithFallback(func(*producer.Message, error) {})},
		lines:  withLine(exhaustedLines, "rocketry.client.dead_letters {message} counter {"+exhausted+dest+sys+"} 1"),
		events: []string{"attempt", "retry", "attempt", "retry", "attempt", "dead_letter"},
		code:   "INTERNAL_ERROR",
	}, {
		name: "retry budget",
		opts: []producer.Option{producer.WithRetryBudget(2, 0.1)}, // the first failure leaves 1 token: not more than half
		lines: []string{
			"messaging.client.operation.duration s histogram {error.type=retry_budget," + op + server + "} count=1",
			"messaging.client.sent.messages {message} counter {error.type=retry_budget," + op + server + "} 1",
			"rocketry.client.active_sends {send} updowncounter {" + dest + sys + "} 0",
			"rocketry.client.retry_budget.refusals {retry} counter {" + dest + sys + "} 1",
			"rocketry.client.send.attempts {attempt} histogram {error.type=retry_budget," + dest + sys + "} count=1 sum=1",
		},
		events: []string{"attempt"},
		code:   "INTERNAL_ERROR",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var b *broker.Broker
			if tc.topics {
				b = brokertest.Start(t, broker.WithAutoCreateTopics(false), broker.WithTopics("billing"))
			} else {
				b = brokertest.Start(t, broker.WithFaults(broker.Faults{InternalRate: 1}))
			}
			r := newRig(t, b.Addr(), tc.opts...)
			_, err := r.p.Send(context.Background(), &producer.Message{Topic: "orders", Body: []byte("x")})
			var se *producer.SendError
			require.ErrorAs(t, err, &se)

			assert.Equal(t, wantLines(b.Addr(), tc.lines...), r.metrics(t))
			s := oneSpan(t, r)
			assert.Equal(t, tc.events, eventNames(s))
			assert.Equal(t, codes.Error, s.Status().Code)
			assert.Equal(t, se.Error(), s.Status().Description)
			assert.Equal(t, tc.code, attr(s.Attributes(), otelrocketry.AttrCode))
		})
	}
}

// TestRocketMQ5: over apache.rocketmq.v2 the system is rocketmq and the
// server the broker's name; the traceparent reaches the broker in the user
// properties.
func TestRocketMQ5(t *testing.T) {
	b := throttleOnce(t)
	r := newRig(t, b.Addr(), producer.WithProtocol(producer.RocketMQ5),
		producer.WithThrottleSchedule(backoff.Constant(5*time.Millisecond)))
	_, err := r.p.Send(context.Background(), &producer.Message{Topic: "orders", Tag: "paid", Body: []byte("x")})
	require.NoError(t, err)
	const (
		dest = "messaging.destination.name=orders,"
		sys  = "messaging.system=rocketmq"
		op   = dest + "messaging.operation.name=send,messaging.operation.type=send," + sys
	)
	assert.Equal(t, []string{
		"messaging.client.operation.duration s histogram {" + op + ",server.address=broker-0} count=1",
		"messaging.client.sent.messages {message} counter {" + op + ",server.address=broker-0} 1",
		"rocketry.client.active_sends {send} updowncounter {" + dest + sys + "} 0",
		"rocketry.client.retries {retry} counter {" + dest + sys + ",rocketry.retry.why=throttled,server.address=broker-0} 1",
		"rocketry.client.retry.delay s histogram {" + dest + sys + ",rocketry.retry.why=throttled} count=1",
		"rocketry.client.send.attempts {attempt} histogram {" + dest + sys + "} count=1 sum=2",
		"rocketry.client.throttles {attempt} counter {" + dest + sys + ",rocketry.throttle.reason=BACKLOG,server.address=broker-0} 1",
	}, r.metrics(t, otelrocketry.MetricRetryDelay))
	s := oneSpan(t, r)
	assert.Equal(t, "paid", attr(s.Attributes(), "messaging.rocketmq.message.tag"))
	stored := b.Messages("orders")
	require.Len(t, stored, 3)
	want := fmt.Sprintf("00-%s-%s-01", s.SpanContext().TraceID(), s.SpanContext().SpanID())
	assert.Equal(t, want, stored[2].GetMessage().GetProperties()[producer.TraceParentProperty])
}

// TestAsyncInFlight: async sends are counted in flight from SendAsync
// until they end; cancelled ones end with error.type canceled.
func TestAsyncInFlight(t *testing.T) {
	b := brokertest.Start(t, broker.WithFaults(broker.Faults{BlackholeRate: 1}))
	r := newRig(t, b.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 3)
	for range 3 {
		require.NoError(t, r.p.SendAsync(ctx, &producer.Message{Topic: "orders"}, func(_ *producer.SendReceipt, err error) { done <- err }))
	}
	assert.Contains(t, r.metrics(t), "rocketry.client.active_sends {send} updowncounter {"+dest+sys+"} 3",
		"the broker answers none of the three")
	cancel()
	for range 3 {
		require.ErrorIs(t, <-done, context.Canceled)
	}
	got := r.metrics(t)
	assert.Contains(t, got, "rocketry.client.active_sends {send} updowncounter {"+dest+sys+"} 0")
	assert.Contains(t, got, wantLines(b.Addr(), "messaging.client.sent.messages {message} counter {error.type=canceled,"+op+server+"} 3")[0])
	assert.Len(t, r.spans.Ended(), 3)
}

func TestNewBadOptions(t *testing.T) {
	_, err := otelrocketry.New(otelrocketry.WithMeterProvider(nil), otelrocketry.WithTracerProvider(nil), otelrocketry.WithPropagator(nil))
	require.Error(t, err)
	for _, name := range []string{"WithMeterProvider(nil)", "WithTracerProvider(nil)", "WithPropagator(nil)"} {
		assert.Contains(t, err.Error(), name)
	}
}

// TestCoreModuleWithoutOpenTelemetry: rocketry's own go.mod requires no
// OpenTelemetry module; only this one does.
func TestCoreModuleWithoutOpenTelemetry(t *testing.T) {
	data, err := os.ReadFile("../go.mod")
	require.NoError(t, err)
	require.Contains(t, string(data), "module github.com/rocketry-go/rocketry\n")
	assert.NotContains(t, string(data), "go.opentelemetry.io")
}
