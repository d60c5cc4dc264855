package otelrocketry

import (
	"context"
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/rocketry-go/rocketry/producer"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// SystemRocketry is messaging.system for a send over rocketry.v1, the
// bundled broker's own protocol; a send over apache.rocketmq.v2 has
// semantic conventions' "rocketmq".
const SystemRocketry = "rocketry"

// The span events of a send.
const (
	EventAttempt    = "attempt"     // an attempt is about to be made: rocketry.attempt, server.address
	EventThrottle   = "throttle"    // the attempt was throttled: rocketry.throttle.reason, rocketry.code
	EventRetry      = "retry"       // a retry follows: rocketry.retry.why, rocketry.retry.delay, rocketry.code
	EventDeadLetter = "dead_letter" // the message went to the dead-letter sink (a fallback, a store)
)

// The span events of a RocketMQ 5 transaction's end and of a recall, on
// the span of the caller's context (of Transaction.Commit and Rollback,
// of Producer.Recall; none for the answer to a broker's check, which has
// no caller): messaging.message.id, rocketry.attempts, server.address,
// rocketry.transaction.check for a check's answer, and exception.message
// when the step failed.
const (
	EventCommit   = "transaction.commit"
	EventRollback = "transaction.rollback"
	EventRecall   = "recall"
)

// AttrTransactionCheck marks the end of a transaction that answers the
// broker's check of an orphan.
const AttrTransactionCheck = attribute.Key("rocketry.transaction.check")

// stepEvent adds the event of a transaction's end or a recall to the span
// of ctx, when it records.
func stepEvent(ctx context.Context, e producer.Event) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	name := EventRecall
	switch e.Kind {
	case producer.EventCommit:
		name = EventCommit
	case producer.EventRollback:
		name = EventRollback
	}
	attrs := serverAttrs(e.Endpoint, []attribute.KeyValue{semconv.MessagingMessageID(e.MessageID), AttrAttempts.Int(e.Attempt)})
	if e.Check {
		attrs = append(attrs, AttrTransactionCheck.Bool(true))
	}
	if e.Err != nil {
		attrs = append(attrs, attribute.String("exception.message", e.Err.Error()))
	}
	span.AddEvent(name, trace.WithAttributes(attrs...))
}

// sendKey is the context key of a send's state.
type sendKey struct{}

// send is one send's state, in its context from StartSend on.
type send struct {
	span     trace.Span
	start    time.Time
	system   string
	topic    string
	endpoint string // of the last attempt
	active   bool   // counted in rocketry.client.active_sends: EndSend uncounts it
}

var (
	opName = semconv.MessagingOperationName("send")
	opType = semconv.MessagingOperationTypeSend
)

// key is the key of one of the send's attribute sets.
func (st *send) key(kind uint8, endpoint, more string) setKey {
	return setKey{kind: kind, system: st.system, topic: st.topic, endpoint: endpoint, more: more}
}

// StartSend starts the send's PRODUCER span, named "send TOPIC", injects
// its context into the outgoing message's properties and counts the send
// in flight. It implements producer.Hook.
func (t *Telemetry) StartSend(ctx context.Context, s *producer.SendInfo) context.Context {
	m := s.Message
	st := &send{start: time.Now(), system: SystemRocketry, topic: m.Topic}
	if s.Protocol == producer.RocketMQ5 {
		st.system = semconv.MessagingSystemRocketMQ.Value.AsString()
	}
	attrs := []attribute.KeyValue{semconv.MessagingSystemKey.String(st.system), semconv.MessagingDestinationName(m.Topic), opName, opType,
		semconv.MessagingMessageID(m.ID), semconv.MessagingMessageBodySize(len(m.Body)), {}}
	if m.Tag != "" {
		attrs[len(attrs)-1] = semconv.MessagingRocketMQMessageTag(m.Tag)
	} else {
		attrs = attrs[:len(attrs)-1]
	}
	ctx, st.span = t.tracer.Start(ctx, "send "+m.Topic, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	if t.inst.active.Enabled(ctx) {
		t.inst.active.Add(ctx, 1, t.sets.get(st.key(setBase, "", "")))
		st.active = true
	}
	injected := false
	defer func() {
		if !injected { // the propagator panicked: the producer calls no EndSend
			t.abandon(ctx, st)
		}
	}()
	t.propagator.Inject(ctx, s)
	injected = true
	return context.WithValue(ctx, sendKey{}, st)
}

// abandon ends the span of a send whose StartSend did not return and
// uncounts it from the sends in flight, as the panic unwinds.
func (t *Telemetry) abandon(ctx context.Context, st *send) {
	if st.active {
		t.inst.active.Add(ctx, -1, t.sets.get(st.key(setBase, "", "")))
	}
	st.span.SetStatus(codes.Error, "otelrocketry: the propagator panicked")
	st.span.End()
}

// OnEvent records the event's metrics and span event. It implements
// producer.Hook.
func (t *Telemetry) OnEvent(ctx context.Context, e producer.Event) {
	switch e.Kind {
	case producer.EventCommit, producer.EventRollback, producer.EventRecall:
		stepEvent(ctx, e) // no send's event
		return
	}
	st, _ := ctx.Value(sendKey{}).(*send)
	if st == nil {
		return
	}
	rec := st.span.IsRecording()
	switch e.Kind {
	case producer.EventAttempt:
		st.endpoint = e.Endpoint
		if rec {
			st.span.AddEvent(EventAttempt, trace.WithAttributes(serverAttrs(e.Endpoint, []attribute.KeyValue{AttrAttempt.Int(e.Attempt)})...))
		}
	case producer.EventThrottle:
		reason := e.Reason.String()
		if t.inst.throttles.Enabled(ctx) {
			t.inst.throttles.Add(ctx, 1, t.sets.get(st.key(setThrottle, e.Endpoint, reason)))
		}
		if rec {
			st.span.AddEvent(EventThrottle, trace.WithAttributes(serverAttrs(e.Endpoint, []attribute.KeyValue{
				AttrAttempt.Int(e.Attempt), AttrThrottleReason.String(reason), AttrCode.String(e.Code.String())})...))
		}
	case producer.EventRetry:
		why := e.Why.String()
		if t.inst.retries.Enabled(ctx) {
			t.inst.retries.Add(ctx, 1, t.sets.get(st.key(setRetry, e.Endpoint, why)))
		}
		if t.inst.retryDelay.Enabled(ctx) {
			t.inst.retryDelay.Record(ctx, e.Delay.Seconds(), t.sets.get(st.key(setDelay, "", why)))
		}
		if rec {
			attrs := serverAttrs(e.Endpoint, []attribute.KeyValue{AttrAttempt.Int(e.Attempt), AttrRetryWhy.String(why),
				AttrRetryDelay.Float64(e.Delay.Seconds()), AttrCode.String(e.Code.String())})
			if e.Err != nil {
				attrs = append(attrs, attribute.String("exception.message", e.Err.Error()))
			}
			st.span.AddEvent(EventRetry, trace.WithAttributes(attrs...))
		}
	case producer.EventExhausted:
		if errors.Is(e.Err, producer.ErrRetryBudget) && t.inst.refusals.Enabled(ctx) {
			t.inst.refusals.Add(ctx, 1, t.sets.get(st.key(setBase, "", "")))
		}
	case producer.EventDeadLetter:
		if t.inst.deadLetters.Enabled(ctx) {
			t.inst.deadLetters.Add(ctx, 1, t.sets.get(st.key(setFailed, "", errorType(e.Err))))
		}
		if rec {
			st.span.AddEvent(EventDeadLetter, trace.WithAttributes(AttrAttempts.Int(e.Attempt)))
		}
	}
}

// EndSend records the send's duration, its message and its attempts, ends
// its span (status Error with the error's text when it failed; Unset when
// stored, as the specification asks of instrumentation) and uncounts it
// from the sends in flight. It implements producer.Hook.
func (t *Telemetry) EndSend(ctx context.Context, r *producer.SendReceipt, err *producer.SendError) {
	st, _ := ctx.Value(sendKey{}).(*send)
	if st == nil {
		return
	}
	attempts, errType := 0, ""
	if err != nil {
		attempts, errType = err.Attempts, errorType(err)
	} else if r != nil {
		attempts = r.Attempts
	}
	if t.inst.duration.Enabled(ctx) || t.inst.sent.Enabled(ctx) {
		op := t.sets.get(st.key(setOp, st.endpoint, errType))
		t.inst.duration.Record(ctx, time.Since(st.start).Seconds(), op)
		t.inst.sent.Add(ctx, 1, op)
	}
	if t.inst.attempts.Enabled(ctx) {
		k := st.key(setBase, "", "")
		if err != nil {
			k = st.key(setFailed, "", errType)
		}
		t.inst.attempts.Record(ctx, int64(attempts), t.sets.get(k))
	}
	if st.active {
		// Only a send counted: an instrument's Enabled may change while a
		// send is under way (the global MeterProvider's, once
		// otel.SetMeterProvider installs the SDK).
		t.inst.active.Add(ctx, -1, t.sets.get(st.key(setBase, "", "")))
	}
	if st.span.IsRecording() {
		st.span.SetAttributes(AttrAttempts.Int(attempts))
		if err != nil {
			st.span.SetAttributes(semconv.ErrorTypeKey.String(errType), AttrCode.String(err.Code.String()))
			st.span.SetStatus(codes.Error, err.Error())
		}
	}
	st.span.End()
}

// serverAttrs appends server.address and server.port of endpoint, a
// "host:port" or a RocketMQ 5 broker name, to attrs.
func serverAttrs(endpoint string, attrs []attribute.KeyValue) []attribute.KeyValue {
	if endpoint == "" {
		return attrs
	}
	host, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		return append(attrs, semconv.ServerAddress(endpoint))
	}
	attrs = append(attrs, semconv.ServerAddress(host))
	if p, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, semconv.ServerPort(p))
	}
	return attrs
}

// errorType is error.type of a failed send: why it ended. A send that
// failed behind its FIFO group's failure is group_failed, first: its error
// wraps the failure of the group's message, whose reason is not its own.
func errorType(err error) string {
	switch {
	case errors.Is(err, producer.ErrGroupFailed):
		return "group_failed"
	case errors.Is(err, producer.ErrAttemptsExhausted):
		return "attempts_exhausted"
	case errors.Is(err, producer.ErrDeadlineTooShort):
		return "deadline_too_short"
	case errors.Is(err, producer.ErrNotRetryable):
		return "not_retryable"
	case errors.Is(err, producer.ErrRetryBudget):
		return "retry_budget"
	case errors.Is(err, producer.ErrClosed):
		return "closed"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return semconv.ErrorTypeOther.Value.AsString()
}
