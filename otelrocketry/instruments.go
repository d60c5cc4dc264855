package otelrocketry

import (
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The metrics' names. The first two are OpenTelemetry's semantic
// conventions for messaging clients; the others are rocketry's own, named
// in the same style.
const (
	// MetricOperationDuration is the duration of each send, from its start
	// to its outcome (the dead-letter hand-off included), in seconds.
	MetricOperationDuration = "messaging.client.operation.duration"
	// MetricSentMessages counts the messages the producer attempted to
	// send, once per send, with error.type when the send failed.
	MetricSentMessages = "messaging.client.sent.messages"
	// MetricSendAttempts is the number of attempts of each send, the first
	// included.
	MetricSendAttempts = "rocketry.client.send.attempts"
	// MetricThrottles counts throttled attempts, by rocketry.throttle.reason.
	MetricThrottles = "rocketry.client.throttles"
	// MetricRetries counts retries, by rocketry.retry.why.
	MetricRetries = "rocketry.client.retries"
	// MetricRetryDelay is the wait chosen before each retry, counted from
	// the start of the attempt before it, in seconds, by rocketry.retry.why.
	MetricRetryDelay = "rocketry.client.retry.delay"
	// MetricActiveSends is the number of sends in flight.
	MetricActiveSends = "rocketry.client.active_sends"
	// MetricDeadLetters counts messages handed to the dead-letter sink (a
	// fallback, a store).
	MetricDeadLetters = "rocketry.client.dead_letters"
	// MetricRetryBudgetRefusals counts retries refused because the retry
	// budget (producer.WithRetryBudget) was spent.
	MetricRetryBudgetRefusals = "rocketry.client.retry_budget.refusals"
)

// rocketry's own attribute keys, beside the semantic conventions' ones.
const (
	// AttrThrottleReason is the throttle reason: BACKLOG, STORAGE_LOAD,
	// SEND_RATE, or UNSPECIFIED when the broker's answer named none.
	AttrThrottleReason = attribute.Key("rocketry.throttle.reason")
	// AttrRetryWhy is the outcome of the attempt before a retry:
	// throttled, failed-not-stored or failed-unknown.
	AttrRetryWhy = attribute.Key("rocketry.retry.why")
	// AttrAttempt is the attempt an event is about, 1-based.
	AttrAttempt = attribute.Key("rocketry.attempt")
	// AttrRetryDelay is the wait chosen before a retry, in seconds.
	AttrRetryDelay = attribute.Key("rocketry.retry.delay")
	// AttrCode is a broker code's name (brokercode.Code's String), such as
	// TOO_MANY_REQUESTS or INTERNAL_ERROR, whichever protocol answered.
	AttrCode = attribute.Key("rocketry.code")
	// AttrAttempts is the number of attempts of a send, on its span.
	AttrAttempts = attribute.Key("rocketry.attempts")
)

// instruments are the metrics of a Telemetry.
type instruments struct {
	duration    metric.Float64Histogram
	sent        metric.Int64Counter
	attempts    metric.Int64Histogram
	throttles   metric.Int64Counter
	retries     metric.Int64Counter
	retryDelay  metric.Float64Histogram
	active      metric.Int64UpDownCounter
	deadLetters metric.Int64Counter
	refusals    metric.Int64Counter
}

// durationBuckets are the semantic conventions' advice for
// messaging.client.operation.duration, reaching to the connection
// backoff's longest waits.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60, 120}

func (in *instruments) init(m metric.Meter) error {
	var err, e error
	in.duration, e = m.Float64Histogram(MetricOperationDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of messaging operation initiated by a producer or consumer client."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	err = errors.Join(err, e)
	in.sent, e = m.Int64Counter(MetricSentMessages, metric.WithUnit("{message}"),
		metric.WithDescription("Number of messages producer attempted to send to the broker."))
	err = errors.Join(err, e)
	in.attempts, e = m.Int64Histogram(MetricSendAttempts, metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts of each send, the first included."),
		metric.WithExplicitBucketBoundaries(1, 2, 3, 4, 5, 7, 10, 15, 20, 50, 100))
	err = errors.Join(err, e)
	in.throttles, e = m.Int64Counter(MetricThrottles, metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts the broker throttled, by throttle reason."))
	err = errors.Join(err, e)
	in.retries, e = m.Int64Counter(MetricRetries, metric.WithUnit("{retry}"),
		metric.WithDescription("Retries, by the outcome of the attempt before them."))
	err = errors.Join(err, e)
	in.retryDelay, e = m.Float64Histogram(MetricRetryDelay, metric.WithUnit("s"),
		metric.WithDescription("The wait chosen before each retry, from the start of the attempt before it."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	err = errors.Join(err, e)
	in.active, e = m.Int64UpDownCounter(MetricActiveSends, metric.WithUnit("{send}"),
		metric.WithDescription("Sends in flight."))
	err = errors.Join(err, e)
	in.deadLetters, e = m.Int64Counter(MetricDeadLetters, metric.WithUnit("{message}"),
		metric.WithDescription("Messages handed to the dead-letter sink (a fallback, a store) after their send failed."))
	err = errors.Join(err, e)
	in.refusals, e = m.Int64Counter(MetricRetryBudgetRefusals, metric.WithUnit("{retry}"),
		metric.WithDescription("Retries refused because the retry budget was spent."))
	return errors.Join(err, e)
}
