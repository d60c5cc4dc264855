package wirev1

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/rocketry-go/rocketry/message"
	"github.com/rocketry-go/rocketry/producer/internal/send"
	"github.com/rocketry-go/rocketry/producer/internal/wire"
)

// The tests of the resolver of a target with a scheme that look at its
// state (moved here from package producer's targets_test.go, which keeps
// those that need only the Producer's API). They drive the transport as
// the Producer does: Prepare, then Send.

// testConfig is the policy of the producer's defaults that these tests
// need: 3 attempts, retries at once.
func testConfig(attemptTimeout time.Duration) *send.Config {
	return &send.Config{
		MaxAttempts:    3,
		AttemptTimeout: attemptTimeout,
		Throttle:       backoff.Immediate,
		Failure:        backoff.Immediate,
		Logger:         slog.New(slog.DiscardHandler),
		Closed:         errors.New("closed"),
	}
}

// newResolvedTransport is the transport of a target with a scheme whose
// resolver is r, closed when the test ends.
func newResolvedTransport(t *testing.T, target string, r resolver.Builder, attemptTimeout time.Duration) *Transport {
	t.Helper()
	env := wire.Env{Cfg: testConfig(attemptTimeout), Pacing: true, HardCtx: context.Background()}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	tr, err := NewResolved(target, []resolver.Builder{r}, dial, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background(), time.Second) })
	return tr
}

// sendOne prepares m and sends it, as the Producer does.
func sendOne(ctx context.Context, tr *Transport, m message.Message) error {
	id, err := tr.Prepare(m)
	if err != nil {
		return err
	}
	m.ID = id
	if _, f := tr.Send(ctx, m, nil, nil); f != nil {
		return f.Cause
	}
	return nil
}

func msg(topic string) message.Message { return message.Message{Topic: topic, Body: []byte("hello")} }

func stateOf(addrs ...string) resolver.State {
	var s resolver.State
	for _, a := range addrs {
		s.Addresses = append(s.Addresses, resolver.Address{Addr: a})
	}
	return s
}

// gate holds the stored answer of one message until opened.
type gate struct {
	id      string
	reached chan struct{}
	open    chan struct{}
	once    sync.Once
}

func newGate(t *testing.T, id string) *gate {
	g := &gate{id: id, reached: make(chan struct{}), open: make(chan struct{})}
	t.Cleanup(g.release)
	return g
}

func (g *gate) release() {
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *gate) observe(r broker.SendRecord) {
	if r.MessageID == g.id && r.Result == broker.SendStored {
		g.once.Do(func() { close(g.reached) })
		<-g.open
	}
}

// TestSchemeTargetFollowsTheResolver: the resolver replaces broker A by B
// while a send to A is in flight. New sends go to B; A's connection stays
// open until that send ends, then closes; A coming back gets a new one.
func TestSchemeTargetFollowsTheResolver(t *testing.T) {
	g := newGate(t, "held-1")
	a := brokertest.Start(t, broker.WithSendObserver(g.observe))
	b := brokertest.Start(t)
	r := manual.NewBuilderWithScheme("rocketrytest")
	r.InitialState(stateOf(a.Addr()))
	tr := newResolvedTransport(t, "rocketrytest:///brokers", r, 10*time.Second)
	ctx := context.Background()

	held := make(chan error, 1)
	go func() {
		held <- sendOne(ctx, tr, message.Message{ID: "held-1", Topic: "t", Body: []byte("x")})
	}()
	<-g.reached
	old := tr.targets.tryAcquire()
	require.NotNil(t, old)
	ccA := old.eps[0].owned
	tr.targets.release(old)
	require.NotNil(t, ccA)

	r.UpdateState(stateOf(b.Addr()))
	for i := range 5 {
		require.NoError(t, sendOne(ctx, tr, msg("t")), "Send(%d) after the update", i)
	}
	assert.Len(t, b.Messages("t"), 5, "sends after the update go to B")
	assert.NotEqual(t, connectivity.Shutdown, ccA.GetState(), "A's connection closed while a send holds it")

	g.release()
	require.NoError(t, <-held)
	assert.Equal(t, connectivity.Shutdown, ccA.GetState(), "A's connection once no send holds it")
	tr.targets.mu.Lock()
	_, live := tr.targets.live[a.Addr()]
	tr.targets.mu.Unlock()
	assert.False(t, live, "A is still among the live endpoints")

	r.UpdateState(stateOf(a.Addr(), b.Addr()))
	before := len(a.Messages("t"))
	for i := range 4 {
		require.NoError(t, sendOne(ctx, tr, msg("t")), "Send(%d) after A came back", i)
	}
	assert.Greater(t, len(a.Messages("t")), before, "A back in the resolver's answer gets sends again")
}
