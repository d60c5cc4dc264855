package producer_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/rocketry-go/rocketry/producer"
)

// panicHook panics in StartSend while armed, and counts the sends it
// started and the ones it was told ended.
type panicHook struct {
	armed        atomic.Bool
	starts, ends atomic.Int32
}

func (h *panicHook) StartSend(ctx context.Context, _ *producer.SendInfo) context.Context {
	if h.armed.Load() {
		panic("hook")
	}
	h.starts.Add(1)
	return ctx
}
func (h *panicHook) OnEvent(context.Context, producer.Event) {}
func (h *panicHook) EndSend(context.Context, *producer.SendReceipt, *producer.SendError) {
	h.ends.Add(1)
}

// recovered runs f and returns what it panicked with.
func recovered(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

// TestPanicUnwindsSend: a panic in the caller's own code during a send (an
// Observer on an attempt, a Hook's StartSend) reaches the caller, as it
// would without rocketry, and leaves nothing behind: the FIFO group's next
// send goes (the group behind an unwound send fails, as behind any failure
// whose outcome the caller did not learn: here nobody waits behind it),
// SendAsync's room is given back, and Close returns at once.
func TestPanicUnwindsSend(t *testing.T) {
	b := brokertest.Start(t)
	var armed atomic.Bool
	hook := &panicHook{}
	p, err := producer.New(b.Addr(), producer.WithProtocol(producer.RocketryV1), producer.WithMaxInFlight(8),
		producer.WithHook(hook),
		producer.WithObserver(func(e producer.Event) {
			if e.Kind == producer.EventAttempt && armed.Load() {
				panic("observer")
			}
		}))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	armed.Store(true)
	assert.Equal(t, "observer", recovered(func() {
		_, _ = p.Send(ctx, &producer.Message{Topic: "t", MessageGroup: "g", Body: []byte("1")})
	}))
	armed.Store(false)
	_, err = p.Send(ctx, &producer.Message{Topic: "t", MessageGroup: "g", Body: []byte("2")})
	require.NoError(t, err, "the group's next send goes")

	hook.armed.Store(true)
	for range 16 { // twice MaxInFlight: each panic must give its slot back
		assert.Equal(t, "hook", recovered(func() {
			_ = p.SendAsync(ctx, &producer.Message{Topic: "t", Body: []byte("a")}, func(*producer.SendReceipt, error) {})
		}))
		assert.Equal(t, "hook", recovered(func() {
			_ = p.SendAsync(ctx, &producer.Message{Topic: "t", MessageGroup: "g", Body: []byte("a")}, func(*producer.SendReceipt, error) {})
		}))
		assert.Equal(t, "hook", recovered(func() {
			_, _ = p.Send(ctx, &producer.Message{Topic: "t", MessageGroup: "g", Body: []byte("s")})
		}))
	}
	hook.armed.Store(false)
	done := make(chan error, 1)
	require.NoError(t, p.SendAsync(ctx, &producer.Message{Topic: "t", MessageGroup: "g", Body: []byte("3")}, func(_ *producer.SendReceipt, err error) { done <- err }))
	require.NoError(t, <-done)

	cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer ccancel()
	require.NoError(t, p.Close(cctx), "no send left counted")
	assert.Equal(t, hook.starts.Load(), hook.ends.Load(), "every send the hook started was ended for it (a span ends)")
}
