// Package otelrocketry records OpenTelemetry metrics and traces of a
// rocketry producer's sends. It is a module of its own, so that rocketry's
// users who do not want OpenTelemetry do not inherit it.
//
// # Plugging it in
//
//	tel, err := otelrocketry.New() // the global MeterProvider and TracerProvider
//	p, err := producer.New(addr, tel.Option())
//
// WithMeterProvider and WithTracerProvider give others. A Telemetry is a
// producer.Hook: it sees each send from its start to its end, with the
// send's context, so that a send's span is a child of the span in the
// caller's context.
//
// # Metrics
//
// Following OpenTelemetry's semantic conventions for messaging clients:
//
//	messaging.client.operation.duration  histogram, s          each send, from its start to its outcome
//	messaging.client.sent.messages       counter, {message}    each send once
//
// with messaging.system ("rocketmq" over apache.rocketmq.v2, "rocketry"
// over rocketry.v1), messaging.destination.name (the topic),
// messaging.operation.name and messaging.operation.type ("send"),
// server.address and server.port (of the last attempt; a RocketMQ 5
// broker's name as its address) and, when the send failed, error.type: why
// it ended (attempts_exhausted, deadline_too_short, not_retryable,
// retry_budget, closed, deadline_exceeded, canceled, or group_failed for a
// FIFO message that failed because an earlier one of its group did).
//
// rocketry's own, each with messaging.system and messaging.destination.name:
//
//	rocketry.client.send.attempts          histogram, {attempt}  attempts per send, the first included; error.type
//	rocketry.client.throttles              counter, {attempt}    throttled attempts; rocketry.throttle.reason, server.*
//	rocketry.client.retries                counter, {retry}      retries; rocketry.retry.why, server.*
//	rocketry.client.retry.delay            histogram, s          the wait chosen before each retry; rocketry.retry.why
//	rocketry.client.active_sends           updowncounter, {send} sends in flight
//	rocketry.client.dead_letters           counter, {message}    messages handed to the dead-letter sink; error.type
//	rocketry.client.retry_budget.refusals  counter, {retry}      retries refused by the retry budget
//
// rocketry.retry.why is the outcome of the attempt before the retry:
// throttled, failed-not-stored or failed-unknown.
//
// # Traces
//
// Each send is one PRODUCER span, "send TOPIC", with messaging.message.id
// and the attributes above. It has an event per attempt ("attempt": its
// number and server.address), per throttle ("throttle": the reason and
// code), per retry ("retry": why, the delay in seconds, the code, the
// error) and "dead_letter" when the message went to the dead-letter sink
// (a fallback, a store). A failed send's status is Error, with the error's text. The span's
// context is injected into the message's properties (W3C traceparent and
// tracestate by default; WithPropagator changes it); over RocketMQ 5 the
// traceparent also goes to the message's trace_context, so that a consumer
// can continue the trace.
//
// A RocketMQ 5 transaction's half message is a send, with its span. Its
// commit or roll back (Transaction.Commit, Rollback) and a recall
// (Producer.Recall) are events on the span of the caller's context:
// "transaction.commit", "transaction.rollback", "recall", with
// messaging.message.id, rocketry.attempts, server.address and, for a
// failure, exception.message.
package otelrocketry
