package producer

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type hookKey struct{}

// hookSend is what a hookRecorder saw of one send.
type hookSend struct {
	info   SendInfo
	events []EventKind
	ctxOK  bool // every event and the end had StartSend's context value
	ends   int
	r      *SendReceipt
	err    *SendError
}

// hookRecorder is a Hook that records each send and sets a trace context.
type hookRecorder struct {
	mu    sync.Mutex
	sends map[string]*hookSend
}

func (h *hookRecorder) StartSend(ctx context.Context, s *SendInfo) context.Context {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sends == nil {
		h.sends = map[string]*hookSend{}
	}
	s.Set(TraceParentProperty, "00-"+s.Message.ID)
	h.sends[s.Message.ID] = &hookSend{info: *s, ctxOK: true}
	return context.WithValue(ctx, hookKey{}, s.Message.ID)
}

func (h *hookRecorder) OnEvent(ctx context.Context, e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.sends[e.MessageID]
	s.events = append(s.events, e.Kind)
	s.ctxOK = s.ctxOK && ctx.Value(hookKey{}) == e.MessageID
}

func (h *hookRecorder) EndSend(ctx context.Context, r *SendReceipt, err *SendError) {
	h.mu.Lock()
	defer h.mu.Unlock()
	id, _ := ctx.Value(hookKey{}).(string)
	s := h.sends[id]
	s.ends++
	s.r, s.err = r, err
}

func (h *hookRecorder) send(id string) hookSend {
	h.mu.Lock()
	defer h.mu.Unlock()
	return *h.sends[id]
}

// TestHookFollowsEachSend: StartSend, the events and EndSend of each send,
// sync and async, stored and dead-lettered, on both protocols, with the
// hook's context throughout; the hook's property reaches the broker, not
// the caller's message.
func TestHookFollowsEachSend(t *testing.T) {
	t.Parallel()
	for _, proto := range []Protocol{RocketryV1, RocketMQ5} {
		t.Run(proto.String(), func(t *testing.T) {
			b := brokertest.Start(t)
			h := &hookRecorder{}
			var fallback []*Message
			var fmu sync.Mutex
			p := newTestProducer(t, b.Addr(), WithProtocol(proto), WithHook(h), WithMaxAttempts(2),
				WithBatching(0, 0, 0),
				WithFallback(func(m *Message, _ error) { fmu.Lock(); fallback = append(fallback, m); fmu.Unlock() }))

			ok := &Message{Topic: "orders", Body: []byte("a"), Properties: map[string]string{"k": "v"}}
			r, err := p.Send(context.Background(), ok)
			require.NoError(t, err)
			assert.Equal(t, map[string]string{"k": "v"}, ok.Properties, "the caller's message is not changed")
			s := h.send(ok.ID)
			assert.Equal(t, []EventKind{EventAttempt, EventSuccess}, s.events)
			assert.True(t, s.ctxOK, "every event has the hook's context")
			assert.Equal(t, 1, s.ends)
			assert.Same(t, r, s.r)
			assert.Nil(t, s.err)
			assert.False(t, s.info.Async)
			assert.Equal(t, proto, s.info.Protocol)
			stored := b.Messages("orders")
			require.Len(t, stored, 1)
			assert.Equal(t, map[string]string{"k": "v", TraceParentProperty: "00-" + ok.ID}, stored[0].GetMessage().GetProperties())

			require.NoError(t, b.SetFaults(broker.Faults{InternalRate: 1}))
			bad := msg("orders")
			done := make(chan error, 1)
			require.NoError(t, p.SendAsync(context.Background(), bad, func(_ *SendReceipt, err error) {
				done <- err
			}))
			var se *SendError
			require.ErrorAs(t, <-done, &se)
			s = h.send(bad.ID)
			assert.Equal(t, []EventKind{EventAttempt, EventRetry, EventAttempt, EventExhausted, EventDeadLetter}, s.events)
			assert.True(t, s.ctxOK)
			assert.Equal(t, 1, s.ends, "EndSend runs before the callback")
			assert.Same(t, se, s.err)
			assert.True(t, s.info.Async)
			fmu.Lock()
			defer fmu.Unlock()
			require.Len(t, fallback, 1)
			assert.Nil(t, fallback[0].Properties, "the fallback gets the caller's message")
		})
	}
}

// TestSendInfoCarrier: Get, Set and Keys read the message's properties
// until Set copies them.
func TestSendInfoCarrier(t *testing.T) {
	t.Parallel()
	m := &Message{Properties: map[string]string{"a": "1"}}
	s := &SendInfo{Message: m}
	assert.Equal(t, "1", s.Get("a"))
	assert.Equal(t, []string{"a"}, s.Keys())
	s.Set("b", "2")
	assert.Equal(t, "2", s.Get("b"))
	assert.ElementsMatch(t, []string{"a", "b"}, s.Keys())
	assert.Equal(t, map[string]string{"a": "1"}, m.Properties)
	assert.Empty(t, (&SendInfo{Message: &Message{}}).Keys())
}

func TestWithHookNil(t *testing.T) {
	t.Parallel()
	_, err := New("127.0.0.1:1", WithProtocol(RocketryV1), WithHook(nil))
	var oe *OptionError
	require.True(t, errors.As(err, &oe), "%v", err)
	assert.Equal(t, "WithHook", oe.Option)
	_, err = NewUnaryClientInterceptor(WithHook(&hookRecorder{}))
	require.True(t, errors.As(err, &oe), "%v", err)
	assert.Equal(t, "WithHook", oe.Option)
}
