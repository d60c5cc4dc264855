package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/rocketry-go/rocketry/brokercode"
)

// A DeadLetter is a message whose send failed after validation (attempts
// spent, deadline too short, not retryable, cancelled or closed), with why:
// what a Producer hands to its DeadLetterSink, and what a dead-letter store
// keeps and gives back for a replay (Producer.Resend).
type DeadLetter struct {
	// Message is the message, with its ID: a replay resends it with that
	// ID, so a broker that already stored it does not store it again.
	Message *Message
	// Err is the last cause, as text.
	Err string
	// Attempts is how many attempts were made, counting the first.
	Attempts int
	// Code is the last broker code, brokercode.Unspecified when none was
	// known.
	Code brokercode.Code
	// MaybeStoredAt names the endpoint of the last attempt whose outcome was
	// unknown (host:port, or a RocketMQ 5 broker's name and endpoints,
	// "broker-a@host:port[;host:port]"): the message may be
	// stored there, so a replay sends it there and nowhere else (see
	// Producer.Resend). Empty when every attempt's outcome was known.
	MaybeStoredAt string
	// DeadLetteredAt is when the message was first handed to a dead-letter
	// sink (a store keeps the first time over replays); zero when not
	// known.
	DeadLetteredAt time.Time
	// SendError is the send's error when the dead letter comes from a live
	// send; nil for one read back from a store.
	SendError *SendError
}

// A DeadLetterSink keeps the messages a Producer could not send
// (WithDeadLetterSink, WithFallback). The dead-letter store of package
// github.com/rocketry-go/rocketry/producer/deadletter is one, durable;
// FallbackFunc makes one of a function.
type DeadLetterSink interface {
	// Put keeps d. It is called on the sending goroutine, concurrently for
	// concurrent sends, and must not keep d.Message beyond its return
	// unless it copies it. A nil error means d is kept:
	// SendError.DeadLettered is then true. d.Message has an ID.
	Put(d *DeadLetter) error
}

// FallbackFunc is a DeadLetterSink made of a function that is handed each
// failed message with the send's error (its *SendError). Its Put calls it
// and returns nil.
type FallbackFunc func(m *Message, err error)

// Put calls f with d's message and send error.
func (f FallbackFunc) Put(d *DeadLetter) error {
	var err error
	if d.SendError != nil {
		err = d.SendError
	} else {
		err = errors.New(d.Err)
	}
	f(d.Message, err)
	return nil
}

// bodyLimiter is a sink with a size limit: New checks WithMaxBodyBytes
// against it, so that a message the Producer accepts can always be kept.
type bodyLimiter interface {
	MaxBodyBytes() int
}

// WithDeadLetterSink sets where every message whose send failed after
// validation is handed, with its ID, last error and the endpoint where it
// may be stored (DeadLetter): typically a store of package
// github.com/rocketry-go/rocketry/producer/deadletter, which the caller
// opens before New and closes after Close. s.Put runs before Send returns
// or the callback runs, and Close waits for it; a Put that fails is logged
// at error level and the SendError says DeadLettered false. When s has a method
// MaxBodyBytes() int, New refuses a WithMaxBodyBytes above it, so that no
// message the Producer accepts is too large to keep. It excludes
// WithFallback. s must not be nil. Applies to New and NewFromConn.
func WithDeadLetterSink(s DeadLetterSink) Option {
	return option{"WithDeadLetterSink", scopeProducer, func(c *config) error {
		if s == nil {
			return invalid("nil", "must not be nil")
		}
		if c.sink != nil {
			return invalid(fmt.Sprintf("%T", s), "excludes WithFallback: set at most one dead-letter sink")
		}
		c.sink, c.sinkAfter = s, false
		return nil
	}}
}

// WithFallback sets a function that is handed every message whose send
// failed after validation (attempts spent, deadline too short, not
// retryable, cancelled or closed), with the send's *SendError, before Send
// returns or the callback runs; the default is none. It is the
// DeadLetterSink FallbackFunc(f), run after the send has left the
// Producer's accounting, so that f may call Close (which then returns when
// its context ends). It excludes WithDeadLetterSink. f runs on the sending
// goroutine and must be safe for concurrent use. f must not be nil.
// Applies to New and NewFromConn.
func WithFallback(f func(m *Message, err error)) Option {
	return option{"WithFallback", scopeProducer, func(c *config) error {
		if f == nil {
			return invalid("nil", "must not be nil")
		}
		if c.sink != nil {
			return invalid("func", "excludes WithDeadLetterSink: set at most one dead-letter sink")
		}
		c.sink, c.sinkAfter = FallbackFunc(f), true
		return nil
	}}
}

// checkSink checks the body limit against the sink's, once, at New.
func (c *config) checkSink(where string) error {
	l, ok := c.sink.(bodyLimiter)
	if !ok {
		return nil
	}
	if n := l.MaxBodyBytes(); c.maxBody > n {
		return &OptionError{Option: "WithMaxBodyBytes", Value: strconv.Itoa(c.maxBody), Where: where,
			Reason: fmt.Sprintf("over the dead-letter sink's limit of %d bytes per body: such a message could not be kept", n)}
	}
	return nil
}

// deadLetter is the DeadLetter of a failed send.
func deadLetter(m *Message, se *SendError) *DeadLetter {
	d := &DeadLetter{Message: m, Attempts: se.Attempts, Code: se.Code, MaybeStoredAt: se.MaybeStoredAt, DeadLetteredAt: time.Now(), SendError: se}
	if se.Cause != nil {
		d.Err = se.Cause.Error()
	} else {
		d.Err = se.Error()
	}
	return d
}

// putDeadLetter hands a failed message to the sink, in the send (before
// core.leave), unless the sink is a fallback (handOff's).
func (p *Producer) putDeadLetter(m *Message, se *SendError) {
	if p.cfg.sink == nil {
		return
	}
	if p.cfg.sinkAfter {
		se.DeadLettered = true // handOff gives it to the fallback next
		return
	}
	if err := p.cfg.sink.Put(deadLetter(m, se)); err != nil {
		p.cfg.Logger.LogAttrs(context.Background(), slog.LevelError, "producer: dead-letter sink failed; message not kept",
			slog.String("message_id", m.ID), slog.String("error", err.Error()))
		return
	}
	se.DeadLettered = true
	p.logDeadLetter(m, se)
}

// handOff gives a failed message to the fallback, when there is one, and
// reports the send's final events. It runs after core.leave: the fallback
// is the caller's code.
func (p *Producer) handOff(ctx context.Context, m *Message, se *SendError) {
	if p.cfg.sink != nil && p.cfg.sinkAfter {
		_ = p.cfg.sink.Put(deadLetter(m, se)) // a FallbackFunc: never fails
		p.logDeadLetter(m, se)
	}
	p.cfg.finish(ctx, se)
}

func (p *Producer) logDeadLetter(m *Message, se *SendError) {
	if p.cfg.Logger.Enabled(context.Background(), slog.LevelWarn) {
		p.cfg.Logger.LogAttrs(context.Background(), slog.LevelWarn, "producer: dead letter",
			slog.String("message_id", m.ID), slog.Int("attempts", se.Attempts), slog.String("error", se.Error()))
	}
}
