package producer

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// gateServer is a rocketry.v1 server that stores every message at once,
// but holds the answer to a message of group "held" until open is closed,
// and of group "gated" until gate is.
type gateServer struct {
	rocketryv1.UnimplementedMessagingServiceServer
	open, gate chan struct{}
	held       chan struct{} // one per held or gated message that arrived
	mu         sync.Mutex
	got        []string // message IDs, in the order they were stored
}

// startGate starts a gateServer on 127.0.0.1:0, stopped at the test's end.
func startGate(t *testing.T) (*gateServer, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := &gateServer{open: make(chan struct{}), gate: make(chan struct{}), held: make(chan struct{}, 16)}
	srv := grpc.NewServer()
	rocketryv1.RegisterMessagingServiceServer(srv, g)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return g, lis.Addr().String()
}

func (g *gateServer) SendMessage(ctx context.Context, req *rocketryv1.SendMessageRequest) (*rocketryv1.SendMessageResponse, error) {
	resp := &rocketryv1.SendMessageResponse{}
	for _, m := range req.GetMessages() {
		wait := map[string]chan struct{}{"held": g.open, "gated": g.gate}[m.GetMessageGroup()]
		if wait != nil {
			g.held <- struct{}{}
			select {
			case <-wait:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		g.mu.Lock()
		g.got = append(g.got, m.GetMessageId())
		g.mu.Unlock()
		resp.Results = append(resp.Results, &rocketryv1.SendResult{MessageId: m.GetMessageId()})
	}
	return resp, nil
}

// TestFIFOWaitHoldsNoSlot: FIFO sends waiting behind their group's held
// message take places in the FIFO queue, not the MaxInFlight slots, so
// other groups and plain messages still go; the queue is bounded
// (TrySendAsync says ErrBufferFull), and the held group is stored in call
// order once its message is answered.
func TestFIFOWaitHoldsNoSlot(t *testing.T) {
	t.Parallel()
	g, addr := startGate(t)
	defer close(g.gate)
	const inFlight = 2
	p := newTestProducer(t, addr, WithMaxInFlight(inFlight), WithAttemptTimeout(time.Minute), WithBatching(0, 0, 0))
	ctx := context.Background()
	done := make(chan string, 16)
	cb := func(id string) func(*SendReceipt, error) {
		return func(_ *SendReceipt, err error) {
			assert.NoError(t, err, id)
			done <- id
		}
	}
	send := func(id, group string) error {
		return p.TrySendAsync(ctx, &Message{ID: id, Topic: "t", MessageGroup: group, Body: []byte(id)}, cb(id))
	}
	// h-0 takes a slot and is held; h-1 and h-2 wait behind it in the
	// queue's two places; h-3 finds the queue full.
	require.NoError(t, send("h-0", "held"))
	<-g.held // at the server: it has traded its place in the queue for a slot
	for _, id := range []string{"h-1", "h-2"} {
		require.NoError(t, send(id, "held"), id)
	}
	require.ErrorIs(t, send("h-3", "held"), ErrBufferFull, "a third FIFO send waiting behind its group")
	// One slot is left: another group's message and a plain one go, one
	// after the other (each waits for the slot the one before frees), while
	// the held group waits.
	for _, m := range []*Message{{ID: "o-0", Topic: "t", MessageGroup: "other"}, {ID: "p-0", Topic: "t"}} {
		m.Body = []byte(m.ID)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		require.NoError(t, p.SendAsync(wctx, m, cb(m.ID)), m.ID)
		assert.Equal(t, m.ID, <-done)
		cancel() // the context bounds the send too
	}

	close(g.open)
	for _, want := range []string{"h-0", "h-1", "h-2"} {
		assert.Equal(t, want, <-done, "the held group completes in call order")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	assert.Equal(t, []string{"o-0", "p-0", "h-0", "h-1", "h-2"}, g.got, "stored")
}

// TestFIFOTurnWhileWaitingForAPlace: a FIFO send that waits for a place in
// the FIFO queue (every place taken by another group's waiting sends)
// takes a slot instead when its turn comes, rather than waiting for a place
// it no longer needs, which would hold its group until the other one
// moves.
func TestFIFOTurnWhileWaitingForAPlace(t *testing.T) {
	t.Parallel()
	g, addr := startGate(t)
	p := newTestProducer(t, addr, WithMaxInFlight(2), WithAttemptTimeout(time.Minute), WithBatching(0, 0, 0))
	ctx := context.Background()
	done := make(chan string, 16)
	send := func(id, group string) {
		require.NoError(t, p.TrySendAsync(ctx, &Message{ID: id, Topic: "t", MessageGroup: group, Body: []byte(id)}, func(_ *SendReceipt, err error) {
			assert.NoError(t, err, id)
			done <- id
		}), id)
	}
	// g-0 and h-0 take both slots, held; g-1 and g-2 take both places.
	send("g-0", "gated")
	<-g.held
	send("h-0", "held")
	<-g.held
	send("g-1", "gated")
	send("g-2", "gated")
	// h-1 waits for a place (SendAsync blocks), behind h-0.
	accepted := make(chan error, 1)
	go func() {
		accepted <- p.SendAsync(ctx, &Message{ID: "h-1", Topic: "t", MessageGroup: "held", Body: []byte("h-1")}, func(_ *SendReceipt, err error) {
			assert.NoError(t, err, "h-1")
			done <- "h-1"
		})
	}()
	close(g.open) // h-0 is answered: h-1's turn, while group "gated" still holds every place
	assert.Equal(t, "h-0", <-done)
	require.NoError(t, <-accepted, "h-1 accepted at its turn, with a slot")
	assert.Equal(t, "h-1", <-done, "h-1 sent while group gated still waits")
	close(g.gate)
	for _, want := range []string{"g-0", "g-1", "g-2"} {
		assert.Equal(t, want, <-done)
	}
}
