package producer

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/rocketry-go/rocketry/brokercode"
	"github.com/rocketry-go/rocketry/producer/internal/send"
)

// Observer is called on every event of every send (WithObserver). It runs on
// the sending goroutine, must be safe for concurrent use and must not block.
type Observer func(Event)

// EventKind says what an Event is about.
type EventKind int

const (
	// EventAttempt: attempt Attempt is about to be made, to Endpoint.
	EventAttempt EventKind = iota + 1
	// EventSuccess: attempt Attempt stored the message.
	EventSuccess
	// EventRetry: attempt Attempt failed with Err and attempt Attempt+1
	// will be made after Delay, counted from the start of attempt Attempt;
	// Why is the outcome's kind.
	EventRetry
	// EventThrottle: attempt Attempt was throttled (rocketry.v1 530,
	// apache.rocketmq.v2 42900, RESOURCE_EXHAUSTED) for Reason. An
	// EventRetry or EventExhausted follows.
	EventThrottle
	// EventExhausted: the send failed for good after Attempt attempts; Err
	// is its *SendError (errors.Is says why: attempts exhausted, deadline
	// too short, not retryable, retry budget, closed, cancelled).
	EventExhausted
	// EventDeadLetter: the failed message was handed to the dead-letter
	// sink (WithFallback's function, or a store); Err is its *SendError.
	EventDeadLetter
	// EventCommit: the transaction of half message MessageID was committed
	// (Transaction.Commit, or, with Check, the answer to the broker's check
	// of an orphaned transaction) after Attempt EndTransaction attempts;
	// Err is set when it failed. It is no send's event: a Hook sees it
	// with the caller's context (the producer's for a check).
	EventCommit
	// EventRollback: the same, for a roll back.
	EventRollback
	// EventRecall: Producer.Recall of the timed message MessageID (empty
	// when the server did not say) after Attempt attempts; Err is set when
	// it failed. No send's event either.
	EventRecall
)

var eventNames = [...]string{
	EventAttempt:    "attempt",
	EventSuccess:    "success",
	EventRetry:      "retry",
	EventThrottle:   "throttle",
	EventExhausted:  "exhausted",
	EventDeadLetter: "dead-letter",
	EventCommit:     "commit",
	EventRollback:   "rollback",
	EventRecall:     "recall",
}

// String returns the kind's name, such as "retry".
func (k EventKind) String() string {
	if k > 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event is one thing that happened to one send.
type Event struct {
	Kind EventKind
	// MessageID is the message's ID; for a call through the interceptor,
	// the ID of the first message of a SendMessageRequest, else empty.
	MessageID string
	// Attempt is the 1-based attempt number this event is about.
	Attempt int
	// Delay (EventRetry) is the wait chosen before the next attempt,
	// counted from the start of attempt Attempt: the schedule's delay,
	// lengthened by a broker's RetryInfo hint if that ends later.
	Delay time.Duration
	// Why (EventRetry) is the kind of the attempt's outcome: Throttled,
	// FailedNotStored or FailedUnknown.
	Why OutcomeKind
	// Code is the broker code of the attempt's answer, brokercode.Unspecified
	// when it had none.
	Code brokercode.Code
	// Reason (EventThrottle) is the throttle reason.
	Reason brokercode.Reason
	// Endpoint is the target of the attempt.
	Endpoint string
	// Err is the attempt's error (EventRetry, EventThrottle) or the send's
	// *SendError (EventExhausted, EventDeadLetter), or the step's error
	// (EventCommit, EventRollback, EventRecall).
	Err error
	// Check (EventCommit, EventRollback) marks the answer to the broker's
	// check of an orphaned transaction (WithTransactionChecker).
	Check bool
}

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
// each of the executor's events as an Event to the observer and the hook.
func (c *config) events() {
	c.Event = nil
	if !c.watched() {
		return
	}
	obs, hook := c.observer, c.hook
	c.Event = func(ctx context.Context, e send.Event) {
		pe := Event{Kind: eventKinds[e.Kind], MessageID: e.ID, Attempt: e.Attempt, Delay: e.Delay, Why: OutcomeKind(e.Why), Code: e.Code, Reason: e.Reason, Endpoint: e.Endpoint, Err: publicError(e.Err)}
		if obs != nil {
			obs(pe)
		}
		if hook != nil {
			hook.OnEvent(ctx, pe)
		}
	}
}

// eventKinds are the executor's event kinds as this package's.
var eventKinds = [...]EventKind{
	send.EventAttempt:  EventAttempt,
	send.EventSuccess:  EventSuccess,
	send.EventThrottle: EventThrottle,
	send.EventRetry:    EventRetry,
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
