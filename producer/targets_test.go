package producer

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq/rmqtest"
)

// The regression tests of issue 13's item 2: a target with a scheme used to
// be one endpoint to the producer, so the retry after an unknown outcome
// went back through gRPC's balancer, which picked another broker (10 of 10
// stored twice with pick_first and a broker that died after storing, 9 of
// 20 with round_robin and a slow answer).

const (
	pickFirst  = `{"loadBalancingConfig":[{"pick_first":{}}]}`
	roundRobin = `{"loadBalancingConfig":[{"round_robin":{}}]}`
)

// schemeTarget is a target with a scheme whose resolver (grpc-go's real
// resolver/manual) gives addrs, and the option that hands the resolver to
// the producer.
func schemeTarget(addrs ...string) (string, *manual.Resolver, Option) {
	r := manual.NewBuilderWithScheme("rocketrytest")
	r.InitialState(stateOf(addrs...))
	return "rocketrytest:///brokers", r, WithResolvers(r)
}

func stateOf(addrs ...string) resolver.State {
	var s resolver.State
	for _, a := range addrs {
		s.Addresses = append(s.Addresses, resolver.Address{Addr: a})
	}
	return s
}

// dyingBroker is a test broker that dies after storing its first message:
// before it answers, its listener closes (new connections are refused) and
// its connections drop, so its client never hears that the message was
// stored.
func dyingBroker(t *testing.T) (*broker.Broker, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var once sync.Once
	var b *broker.Broker
	b, err = broker.New(broker.WithSendObserver(func(r broker.SendRecord) {
		if r.Result == broker.SendStored {
			once.Do(func() {
				lis.Close()
				b.DropConnections()
			})
		}
	}))
	require.NoError(t, err)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = b.Serve(lis) // ends with an error when the broker dies
	}()
	t.Cleanup(func() {
		b.Stop()
		<-served
	})
	return b, lis.Addr().String()
}

// storedOn counts the brokers that stored message id of topic.
func storedOn(topic, id string, bs ...*broker.Broker) int {
	n := 0
	for _, b := range bs {
		for _, m := range b.Messages(topic) {
			if m.GetMessage().GetMessageId() == id {
				n++
				break
			}
		}
	}
	return n
}

// TestSchemeTargetBrokerDiesAfterStoring: pick_first over two brokers
// behind one scheme target; the broker that takes the first attempt stores
// the message and dies before answering. The retries stay on it (it may
// hold the message, and it does): the message is stored once, and the send
// fails, naming the broker that died, instead of storing a second copy on
// the other broker.
func TestSchemeTargetBrokerDiesAfterStoring(t *testing.T) {
	const rounds = 3
	for i := range rounds {
		a, aAddr := dyingBroker(t)
		b, bAddr := dyingBroker(t)
		target, _, res := schemeTarget(aAddr, bAddr)
		rec := &recorder{}
		p := newTestProducer(t, target, res, WithDialOptions(grpc.WithDefaultServiceConfig(pickFirst)),
			WithAttemptTimeout(400*time.Millisecond), WithMaxAttempts(2), WithObserver(rec.observe))
		m := msg("t")
		_, err := p.Send(context.Background(), m)

		require.Equal(t, 1, storedOn("t", m.ID, a, b), "round %d: brokers holding the message", i)
		var se *SendError
		require.ErrorAs(t, err, &se, "round %d: Send(...) = %v; want a *SendError (the broker died with the message)", i, err)
		assert.ErrorIs(t, err, ErrConnectionRefused, "round %d: the retry waited for the broker that died, which is named", i)
		assert.Equal(t, 2, se.Attempts, "round %d: attempts", i)
		var eps []string
		for _, e := range rec.events() {
			if e.Kind == EventAttempt {
				eps = append(eps, e.Endpoint)
			}
		}
		require.Len(t, eps, 2, "round %d: attempts %v", i, eps)
		assert.Equal(t, eps[0], eps[1], "round %d: the retry after the unknown outcome went to another broker", i)
		assert.Contains(t, []string{aAddr, bAddr}, eps[0], "round %d: endpoint names an address", i)
	}
}

// slowFirst makes the first stored answer of each message slow: it holds
// the answer until the broker sees the same message again (the client's
// retry, after its attempt timed out) or the test ends.
type slowFirst struct {
	mu   sync.Mutex
	seen map[string]chan struct{}
	done chan struct{}
}

func newSlowFirst(t *testing.T) *slowFirst {
	s := &slowFirst{seen: map[string]chan struct{}{}, done: make(chan struct{})}
	t.Cleanup(func() { close(s.done) }) // before the brokers stop (cleanups run last-in first-out)
	return s
}

func (s *slowFirst) observe(r broker.SendRecord) {
	s.mu.Lock()
	ch, ok := s.seen[r.MessageID]
	if !ok && r.Result == broker.SendStored {
		ch = make(chan struct{})
		s.seen[r.MessageID] = ch
		s.mu.Unlock()
		select {
		case <-ch:
		case <-s.done:
		}
		return
	}
	if ok {
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
	s.mu.Unlock()
}

// TestSchemeTargetSlowAnswerStaysOnItsBroker: round_robin over two brokers
// behind one scheme target; the first answer to each message comes after
// the attempt's timeout. The retry stays on the broker that stored it and
// reads the duplicate: every message is stored once.
func TestSchemeTargetSlowAnswerStaysOnItsBroker(t *testing.T) {
	slow := newSlowFirst(t)
	a := brokertest.Start(t, broker.WithSendObserver(slow.observe))
	b := brokertest.Start(t, broker.WithSendObserver(slow.observe))
	target, _, res := schemeTarget(a.Addr(), b.Addr())
	p := newTestProducer(t, target, res, WithDialOptions(grpc.WithDefaultServiceConfig(roundRobin)),
		WithAttemptTimeout(100*time.Millisecond), WithMaxAttempts(3))
	const n = 10
	ids := make([]string, n)
	for i := range n {
		m := msg("t")
		r, err := p.Send(context.Background(), m)
		require.NoError(t, err, "Send(%d)", i)
		assert.True(t, r.Duplicate, "Send(%d): the retry read the first attempt's copy", i)
		assert.GreaterOrEqual(t, r.Attempts, 2, "Send(%d) attempts", i)
		ids[i] = m.ID
	}
	twice := 0
	for _, id := range ids {
		if storedOn("t", id, a, b) > 1 {
			twice++
		}
	}
	assert.Equal(t, 0, twice, "messages stored on two brokers")
	assert.Len(t, append(a.Messages("t"), b.Messages("t")...), n, "messages stored")
	assert.NotEmpty(t, a.Messages("t"), "first attempts go round robin over the resolved addresses")
	assert.NotEmpty(t, b.Messages("t"), "first attempts go round robin over the resolved addresses")
}

// TestSchemeTargetFollowsTheResolver, which looks at the resolver's
// state, is in producer/internal/wire/v1.

// TestSchemeTargetWaitsForTheResolver: a send made before the resolver's
// first answer waits for it within its attempt; a resolver with no address
// fails the attempt at once, known not stored, with ErrNoEndpoints.
func TestSchemeTargetWaitsForTheResolver(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t)
	r := manual.NewBuilderWithScheme("rocketrytest")
	attempt := make(chan struct{})
	var once sync.Once
	p := newTestProducer(t, "rocketrytest:///later", WithResolvers(r), WithMaxAttempts(2), WithObserver(func(e Event) {
		if e.Kind == EventAttempt {
			once.Do(func() { close(attempt) })
		}
	}))
	done := make(chan error, 1)
	go func() {
		_, err := p.Send(context.Background(), msg("t"))
		done <- err
	}()
	<-attempt // the attempt waits for the resolver
	r.UpdateState(stateOf(b.Addr()))
	require.NoError(t, <-done)
	assert.Len(t, b.Messages("t"), 1)

	r.UpdateState(resolver.State{})
	_, err := p.Send(context.Background(), msg("t"))
	var se *SendError
	require.ErrorAs(t, err, &se)
	assert.ErrorIs(t, err, ErrNoEndpoints)
	assert.ErrorIs(t, err, ErrAttemptsExhausted)
	assert.Equal(t, FailedNotStored, se.Last)
	assert.Equal(t, 2, se.Attempts)
}

// TestSchemeTargetResolvesAgain: when an endpoint cannot be reached, its
// connection asks the target's resolver to resolve again (a DNS resolver
// resolves only when asked), and the sends follow the new answer.
func TestSchemeTargetResolvesAgain(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t)
	dead := rmqtest.ClosedAddr(t)
	target, r, res := schemeTarget(dead)
	asked := make(chan struct{}, 1)
	r.ResolveNowCallback = func(resolver.ResolveNowOptions) {
		select {
		case asked <- struct{}{}:
		default:
		}
	}
	p := newTestProducer(t, target, res, WithMaxAttempts(2))
	_, err := p.Send(context.Background(), msg("t"))
	require.ErrorIs(t, err, ErrConnectionRefused)
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the resolver was never asked to resolve again")
	}
	r.UpdateState(stateOf(b.Addr()))
	_, err = p.Send(context.Background(), msg("t"))
	require.NoError(t, err)
	assert.Len(t, b.Messages("t"), 1)
}

// TestSchemeTargetDNS: the real dns resolver, from gRPC's registry.
func TestSchemeTargetDNS(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t)
	_, port, err := net.SplitHostPort(b.Addr())
	require.NoError(t, err)
	p := newTestProducer(t, "dns:///localhost:"+port)
	for i := range 3 {
		_, err := p.Send(context.Background(), msg("t"))
		require.NoError(t, err, "Send(%d)", i)
	}
	assert.Len(t, b.Messages("t"), 3)
}

// TestSchemeTargetUnix: gRPC's unix resolver gives an address whose
// network is carried in its attributes; the endpoint's own connection
// dials it as given.
func TestSchemeTargetUnix(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "b.sock")
	lis, err := net.Listen("unix", sock)
	require.NoError(t, err)
	b, err := broker.New()
	require.NoError(t, err)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = b.Serve(lis)
	}()
	t.Cleanup(func() {
		b.Stop()
		<-served
	})
	p := newTestProducer(t, "unix://"+sock)
	_, err = p.Send(context.Background(), msg("t"))
	require.NoError(t, err)
	assert.Len(t, b.Messages("t"), 1)
}

// TestSchemeTargetRefused: targets New cannot use fail there, with
// ErrInvalidTarget and a line that says why.
func TestSchemeTargetRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		target string
		opts   []Option
		want   string
	}{
		{"nosuchscheme:///x:1", []Option{WithProtocol(RocketryV1)}, `no resolver for scheme "nosuchscheme"`},
		{"dns:///localhost:8081", nil, "a target with a scheme takes WithProtocol(RocketryV1)"},
		{"dns:///localhost:8081", []Option{WithProtocol(RocketMQ5)}, "takes the proxy's access points as host:port"},
		{"", nil, "target is empty"},
		{"a:1,b", nil, `endpoint "b" is not host:port`},
	}
	for _, tt := range tests {
		p, err := New(tt.target, tt.opts...)
		if p != nil {
			_ = p.Close(context.Background())
		}
		require.Error(t, err, "New(%q, WithProtocol(RocketryV1))", tt.target)
		assert.True(t, errors.Is(err, ErrInvalidTarget), "New(%q, WithProtocol(RocketryV1)) = %v; want ErrInvalidTarget", tt.target, err)
		assert.Contains(t, err.Error(), tt.want)
	}
}
