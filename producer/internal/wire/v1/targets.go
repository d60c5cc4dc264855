package wirev1

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"

	"github.com/rocketry-go/rocketry/producer/internal/pace"
	"github.com/rocketry-go/rocketry/producer/internal/send"
	"github.com/rocketry-go/rocketry/producer/internal/wire"
	"github.com/rocketry-go/rocketry/senderr"
)

// This file maps a target to the brokers a send may use. A host:port list
// is a fixed endpointSet, one connection per endpoint. A target with a
// scheme ("dns:///brokers:7777", or any scheme a gRPC resolver is
// registered for) is resolved here, not by one gRPC channel's balancer: the
// resolver's state updates land in a targetResolver, which keeps one
// connection per resolved endpoint. A send holds the set it started with
// for all its attempts, so that endpoint ep names the same broker on every
// attempt and a retry after an unknown outcome stays on the broker that may
// hold the message (a balancer would pick another one).

// endpoint is one broker of a target: its connection and throttle state.
type endpoint struct {
	name  string // for events, logs and batches: the address(es) dialled
	cc    grpc.ClientConnInterface
	owned *grpc.ClientConn // closed by the Producer; nil for NewFromConn's
	pace  pace.Pacers
	reach send.Reach
	held  int // targetResolver.mu: the endpointSets holding it
}

// endpointSet is the endpoints of a target at one time. Endpoint ep of a
// send is eps[ep%len(eps)].
type endpointSet struct {
	eps  []*endpoint
	refs int // targetResolver.mu: sends holding the set, plus one while current
}

func (s *endpointSet) at(ep int) *endpoint {
	if len(s.eps) == 1 {
		return s.eps[0]
	}
	return s.eps[uint(ep)%uint(len(s.eps))] // ep counts sends: it may wrap negative
}

// close closes the connections of a set that no resolver updates (a
// host:port list): Close's, after the last send.
func (s *endpointSet) close() error {
	var errs []error
	for _, e := range s.eps {
		errs = append(errs, e.closeConn())
	}
	return errors.Join(errs...)
}

// closeConn closes the endpoint's connection when the Producer owns it,
// once. Closing a connection makes no call back into the producer.
func (e *endpoint) closeConn() error {
	if e.owned == nil {
		return nil
	}
	err := e.owned.Close()
	e.owned = nil
	return err
}

// HasScheme reports whether target is a URL with a scheme, as gRPC reads
// targets ("dns:///host:port", "unix:///path", "xds:///name").
func HasScheme(target string) bool {
	return strings.Contains(target, "://")
}

// targetResolver is the resolver.ClientConn of a target with a scheme: it
// keeps one connection per endpoint the resolver gives, and the current
// endpointSet. Connections of endpoints the resolver removed are closed
// once no send holds a set that has them. Its methods are safe for
// concurrent use; the resolver calls it from its own goroutines (or from
// Build).
type targetResolver struct {
	target string // as given to New
	dial   []grpc.DialOption

	// r is the resolver, read without mu: an endpoint's connection asks it
	// to resolve again (fixedEndpoint.ResolveNow) from gRPC's goroutines,
	// which closing a connection under mu may wait for.
	rmu sync.Mutex
	r   resolver.Resolver

	mu      sync.Mutex
	cur     *endpointSet         // nil until the first update
	live    map[string]*endpoint // every endpoint with a connection, by name
	lastErr error                // the resolver's last error, or the last update's
	first   chan struct{}        // closed at the first update or error
	closed  bool
}

// newTargetResolver starts resolving target with the builder of its scheme
// (resolvers, from WithResolvers, first, then gRPC's registry), its
// endpoints dialled with dial, and returns at once: the first state may
// come later (sends wait for it, within their attempt).
func newTargetResolver(target string, resolvers []resolver.Builder, dial []grpc.DialOption) (*targetResolver, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, wire.BadTarget("producer: New(%q): target is not a URL: %v", target, err)
	}
	var b resolver.Builder
	for _, rb := range resolvers {
		if rb.Scheme() == u.Scheme {
			b = rb
		}
	}
	if b == nil {
		b = resolver.Get(u.Scheme)
	}
	if b == nil {
		return nil, wire.BadTarget("producer: New(%q): no resolver for scheme %q (register one with gRPC's resolver.Register, or give it with WithResolvers)", target, u.Scheme)
	}
	rt := resolver.Target{URL: *u}
	authority := rt.Endpoint()
	if ao, ok := b.(resolver.AuthorityOverrider); ok {
		authority = ao.OverrideAuthority(rt)
	}
	t := &targetResolver{
		target: target,
		dial:   append([]grpc.DialOption{grpc.WithAuthority(authority)}, dial...),
		live:   map[string]*endpoint{},
		first:  make(chan struct{}),
	}
	r, err := b.Build(rt, t, resolver.BuildOptions{DisableServiceConfig: true, Authority: authority})
	if err != nil {
		_ = t.close()
		return nil, fmt.Errorf("producer: New(%q): resolver: %w", target, err)
	}
	t.rmu.Lock()
	t.r = r
	t.rmu.Unlock()
	return t, nil
}

// UpdateState takes the resolver's new endpoints: those it already has keep
// their connection, new ones are dialled, and the removed ones are closed
// once no send holds them. An empty list is an error to the resolver (it
// resolves again later); the sends then fail at once, known not stored.
func (t *targetResolver) UpdateState(s resolver.State) error {
	eps := s.Endpoints
	if len(eps) == 0 {
		for _, a := range s.Addresses {
			eps = append(eps, resolver.Endpoint{Addresses: []resolver.Address{a}})
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return senderr.ErrClosed
	}
	set := &endpointSet{refs: 1}
	seen := map[string]bool{}
	var err error
	for _, rep := range eps {
		name := endpointName(rep)
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		e := t.live[name]
		if e == nil {
			if e, err = t.dialEndpoint(name, rep); err != nil {
				break
			}
			t.live[name] = e
		}
		set.eps = append(set.eps, e)
	}
	for _, e := range set.eps {
		e.held++
	}
	if err == nil && len(set.eps) == 0 {
		err = fmt.Errorf("producer: target %q: the resolver gave no address", t.target)
	}
	t.lastErr = err
	old := t.cur
	t.cur = set
	if old != nil {
		t.releaseLocked(old)
	}
	t.started()
	return err
}

// ReportError records the resolver's error; the current endpoints, if any,
// stay in use.
func (t *targetResolver) ReportError(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lastErr = fmt.Errorf("producer: target %q: resolver: %w", t.target, err)
	t.started()
}

// NewAddress is the deprecated form of UpdateState.
func (t *targetResolver) NewAddress(addrs []resolver.Address) {
	_ = t.UpdateState(resolver.State{Addresses: addrs})
}

// ParseServiceConfig refuses service configs: the producer makes one
// connection per endpoint and retries by its own options.
func (t *targetResolver) ParseServiceConfig(string) *serviceconfig.ParseResult {
	return &serviceconfig.ParseResult{Err: errors.New("producer: service configs are not used")}
}

// started closes first once; t.mu is held.
func (t *targetResolver) started() {
	select {
	case <-t.first:
	default:
		close(t.first)
	}
}

// endpointName names a resolved endpoint by its addresses.
func endpointName(e resolver.Endpoint) string {
	names := make([]string, 0, len(e.Addresses))
	for _, a := range e.Addresses {
		if a.Addr != "" {
			names = append(names, a.Addr)
		}
	}
	return strings.Join(names, ",")
}

// dialEndpoint makes the connection of one resolved endpoint: a
// grpc.ClientConn whose own resolver gives exactly that endpoint, with the
// target's authority (the TLS server name, as one channel to the whole
// target would have used). t.mu is held; grpc.NewClient does no I/O.
func (t *targetResolver) dialEndpoint(name string, rep resolver.Endpoint) (*endpoint, error) {
	one := fixedEndpoint{ep: rep, t: t}
	opts := append(t.dial[:len(t.dial):len(t.dial)], grpc.WithResolvers(one))
	cc, err := grpc.NewClient(fixedScheme+":///"+url.PathEscape(name), opts...)
	if err != nil {
		return nil, fmt.Errorf("producer: target %q: endpoint %s: %w", t.target, name, err)
	}
	return &endpoint{name: name, cc: cc, owned: cc}, nil
}

// acquire returns the current endpoints for one send, which holds them
// until release. It waits for the resolver's first answer within ctx. It
// fails, and the send's attempt with it (known not stored), when the
// resolver has given no endpoint: the error wraps senderr.ErrNoEndpoints.
func (t *targetResolver) acquire(ctx context.Context) (*endpointSet, error) {
	select {
	case <-t.first:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: target %q: no answer from the resolver yet: %w", senderr.ErrNoEndpoints, t.target, context.Cause(ctx))
	}
	if s := t.tryAcquire(); s != nil {
		return s, nil
	}
	t.mu.Lock()
	closed, err := t.closed, t.lastErr
	t.mu.Unlock()
	if closed {
		return nil, senderr.ErrClosed
	}
	t.resolveNow()
	if err == nil {
		return nil, fmt.Errorf("%w: target %q", senderr.ErrNoEndpoints, t.target)
	}
	return nil, fmt.Errorf("%w: %w", senderr.ErrNoEndpoints, err)
}

// tryAcquire is acquire without waiting: nil before the first endpoints.
func (t *targetResolver) tryAcquire() *endpointSet {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.cur; s != nil && len(s.eps) > 0 && !t.closed {
		s.refs++
		return s
	}
	return nil
}

// release ends a send's hold on s.
func (t *targetResolver) release(s *endpointSet) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.releaseLocked(s)
}

// releaseLocked drops one reference to s; the last one closes the
// connections of its endpoints that no other set holds. t.mu is held.
func (t *targetResolver) releaseLocked(s *endpointSet) {
	s.refs--
	if s.refs > 0 {
		return
	}
	for _, e := range s.eps {
		e.held--
		if e.held == 0 {
			delete(t.live, e.name)
			_ = e.closeConn()
		}
	}
}

// resolveNow asks the resolver to resolve again (an endpoint could not be
// reached); resolvers rate-limit it.
func (t *targetResolver) resolveNow() {
	t.rmu.Lock()
	r := t.r
	t.rmu.Unlock()
	if r != nil {
		r.ResolveNow(resolver.ResolveNowOptions{})
	}
}

// close stops the resolver and closes every connection. The Producer calls
// it after its last send.
func (t *targetResolver) close() error {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.rmu.Lock()
	r := t.r
	t.r = nil
	t.rmu.Unlock()
	if r != nil {
		r.Close() // may wait for a resolver goroutine that calls UpdateState
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []error
	for name, e := range t.live {
		errs = append(errs, e.closeConn())
		delete(t.live, name)
	}
	t.cur = nil
	t.started()
	return errors.Join(errs...)
}

// fixedScheme is the scheme of an endpoint's own connection, known only to
// that connection (grpc.WithResolvers).
const fixedScheme = "rocketry-endpoint"

// fixedEndpoint is the resolver of one endpoint's connection: it gives the
// endpoint, as the target's resolver gave it (addresses, attributes, server
// name), and nothing else. When the connection asks to resolve again (its
// broker could not be reached, or went away), the target's resolver is
// asked: a DNS resolver resolves only when asked.
type fixedEndpoint struct {
	ep resolver.Endpoint
	t  *targetResolver
}

func (f fixedEndpoint) Scheme() string { return fixedScheme }

func (f fixedEndpoint) Build(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	// One endpoint, for pick_first: an error could only say that the
	// channel is closing.
	_ = cc.UpdateState(resolver.State{Endpoints: []resolver.Endpoint{f.ep}, Addresses: f.ep.Addresses})
	return f, nil
}

func (f fixedEndpoint) ResolveNow(resolver.ResolveNowOptions) { f.t.resolveNow() }
func (fixedEndpoint) Close()                                  {}
