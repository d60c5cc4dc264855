package producer

import (
	"context"
	"maps"
	"slices"

	"github.com/rocketry-go/rocketry/event"
)

// Observer is called on every event of every send (WithObserver). It runs on
// the sending goroutine, must be safe for concurrent use and must not block.
type Observer func(Event)

// EventKind says what an Event is about. It is event.Kind (package
// github.com/rocketry-go/rocketry/event, which documents each kind).
type EventKind = event.Kind

// The kinds of an Event (event.Attempt, ...; see there).
const (
	// EventAttempt: attempt Attempt is about to be made, to Endpoint.
	EventAttempt = event.Attempt
	// EventSuccess: attempt Attempt stored the message.
	EventSuccess = event.Success
	// EventRetry: attempt Attempt failed with Err and attempt Attempt+1
	// will be made after Delay, counted from the start of attempt Attempt;
	// Why is the outcome's kind.
	EventRetry = event.Retry
	// EventThrottle: attempt Attempt was throttled (rocketry.v1 530,
	// apache.rocketmq.v2 42900, RESOURCE_EXHAUSTED) for Reason. An
	// EventRetry or EventExhausted follows.
	EventThrottle = event.Throttle
	// EventExhausted: the send failed for good after Attempt attempts; Err
	// is its *SendError (errors.Is says why: attempts exhausted, deadline
	// too short, not retryable, retry budget, closed, cancelled).
	EventExhausted = event.Exhausted
	// EventDeadLetter: the failed message was handed to the dead-letter
	// sink (WithFallback's function, or a store); Err is its *SendError.
	EventDeadLetter = event.DeadLetter
	// EventCommit: the transaction of half message MessageID was committed
	// (Transaction.Commit, or, with Check, the answer to the broker's check
	// of an orphaned transaction) after Attempt EndTransaction attempts;
	// Err is set when it failed. It is no send's event: a Hook sees it
	// with the caller's context (the producer's for a check).
	EventCommit = event.Commit
	// EventRollback: the same, for a roll back.
	EventRollback = event.Rollback
	// EventRecall: Producer.Recall of the timed message MessageID (empty
	// when the server did not say) after Attempt attempts; Err is set when
	// it failed. No send's event either.
	EventRecall = event.Recall
)

// Event is one thing that happened to one send. It is event.Event, which
// documents its fields: the executor makes a send's events as Events, and
// the producer hands them on as they are.
type Event = event.Event

// Hook follows each send of a Producer from its start to its end, with the
// send's context: the seam for telemetry, such as the OpenTelemetry adapter
// in the module github.com/rocketry-go/rocketry/otelrocketry. WithHook sets
// one; without one, a send pays nothing for it. StartSend runs on the
// goroutine that calls Send or SendAsync, the other methods on the one that
// runs the send (the caller's for Send, a worker's for SendAsync); all must
// be safe for concurrent use and must not block.
//
// Every send that is accepted (validated, and not refused by Close or a
// full buffer) gets exactly one StartSend, then its events, then exactly
// one EndSend.
type Hook interface {
	// StartSend is called once the send is accepted, before its first
	// attempt; the message has its ID. It returns the context the send runs on, which must be ctx or
	// derived from it (a span in it reaches every attempt's call, and gRPC
	// interceptors on the connection). It may add properties to the
	// outgoing message with s.Set, such as a trace context.
	StartSend(ctx context.Context, s *SendInfo) context.Context
	// OnEvent is called with every event of the send, the events an
	// Observer sees, and the send's context (derived from StartSend's).
	OnEvent(ctx context.Context, e Event)
	// EndSend is called after the send's last event (after its dead-letter
	// hand-off, before an async send's callback): with the receipt when the
	// message was stored, else with the send's *SendError.
	EndSend(ctx context.Context, r *SendReceipt, err *SendError)
}

// TraceParentProperty is the property of an outgoing message that carries
// its W3C trace context (see WithHook). Over apache.rocketmq.v2, a message
// with this property also carries its value in the trace_context field of
// its SystemProperties, where RocketMQ 5 looks for it.
const TraceParentProperty = "traceparent"

// SendInfo describes a send to Hook.StartSend. Its Get, Set and Keys
// methods are those of OpenTelemetry's propagation.TextMapCarrier, so a
// propagator can inject a trace context into the outgoing message through
// it. It is valid only during StartSend.
type SendInfo struct {
	// Message is the message, with its ID; a hook must not change it.
	Message *Message
	// Protocol is the wire protocol of the send.
	Protocol Protocol
	// Async is true for a send started by SendAsync or TrySendAsync.
	Async bool

	props map[string]string // the outgoing properties, once Set was called
}

// Get returns the outgoing message's property key ("" if it has none).
func (s *SendInfo) Get(key string) string {
	if s.props != nil {
		return s.props[key]
	}
	return s.Message.Properties[key]
}

// Set sets property key of the outgoing message: every attempt carries it.
// The caller's Message is not changed (its properties are copied once), so
// a dead-lettered message or a fallback's does not carry it.
func (s *SendInfo) Set(key, value string) {
	if s.props == nil {
		s.props = make(map[string]string, len(s.Message.Properties)+1)
		maps.Copy(s.props, s.Message.Properties)
	}
	s.props[key] = value
}

// Keys returns the keys of the outgoing message's properties.
func (s *SendInfo) Keys() []string {
	p := s.props
	if p == nil {
		p = s.Message.Properties
	}
	return slices.Collect(maps.Keys(p))
}

// emit reports e to the observer and the hook.
func (c *config) emit(ctx context.Context, e Event) {
	if c.observer != nil {
		c.observer(e)
	}
	if c.hook != nil {
		c.hook.OnEvent(ctx, e)
	}
}

// watched reports whether anyone sees events: when not, none is made.
func (c *config) watched() bool { return c.observer != nil || c.hook != nil }

// events sets the executor's event callback (send.Config.Event): nil when
// nobody watches, so that a send makes no event; else one that reports
// each of the executor's events to the observer and the hook, its error
// as the public API gives it (explainProtocol).
func (c *config) events() {
	c.Event = nil
	if !c.watched() {
		return
	}
	obs, hook := c.observer, c.hook
	c.Event = func(ctx context.Context, e Event) {
		e.Err = explainProtocol(e.Err)
		if obs != nil {
			obs(e)
		}
		if hook != nil {
			hook.OnEvent(ctx, e)
		}
	}
}

// finish reports the end of a failed send: EventExhausted, then
// EventDeadLetter when the message was handed off.
func (c *config) finish(ctx context.Context, se *SendError) {
	if c.watched() {
		c.emit(ctx, Event{Kind: EventExhausted, MessageID: se.MessageID, Attempt: se.Attempts, Code: se.Code, Reason: se.Reason, Err: se})
		if se.DeadLettered {
			c.emit(ctx, Event{Kind: EventDeadLetter, MessageID: se.MessageID, Attempt: se.Attempts, Code: se.Code, Reason: se.Reason, Err: se})
		}
	}
}

// startSend runs the hook's StartSend: it returns the send's context and
// the message to put on the wire (m, or a copy with the hook's
// properties).
func (p *Producer) startSend(ctx context.Context, m *Message, async bool) (context.Context, *Message) {
	h := p.cfg.hook
	if h == nil {
		return ctx, m
	}
	s := SendInfo{Message: m, Protocol: p.cfg.protocol, Async: async}
	ctx = h.StartSend(ctx, &s)
	if s.props == nil {
		return ctx, m
	}
	wm := *m
	wm.Properties = s.props
	return ctx, &wm
}

// endSend runs the hook's EndSend.
func (p *Producer) endSend(ctx context.Context, r *SendReceipt, se *SendError) {
	if h := p.cfg.hook; h != nil {
		h.EndSend(ctx, r, se)
	}
}
