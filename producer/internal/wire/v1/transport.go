package wirev1

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"

	"github.com/rocketry-go/rocketry/message"
	"github.com/rocketry-go/rocketry/producer/internal/send"
	"github.com/rocketry-go/rocketry/producer/internal/wire"
)

// Transport is rocketry.v1 (a wire.Transport): a fixed set of endpoints (a
// host:port list, NewFromConn's connection) or a target's resolver
// (targets.go), exactly one of the two. A send's receipt (a
// message.Receipt) is part of its one allocation (sendCall).
type Transport struct {
	eps     *endpointSet    // rocketry.v1 to host:port endpoints: fixed (targets.go)
	targets *targetResolver // rocketry.v1 to a target with a scheme: resolved
	next    atomic.Uint32   // round robin over the endpoints for first attempts
	ids     *wire.IDGen
	env     wire.Env
}

func newTransport(eps *endpointSet, targets *targetResolver, env wire.Env) *Transport {
	return &Transport{eps: eps, targets: targets, ids: wire.NewIDGen(), env: env}
}

// New returns the transport of a host:port list, addrs, one connection
// each, dialled with dial (lazily: New does no I/O). target is as given to
// producer.New, for errors.
func New(target string, addrs []string, dial []grpc.DialOption, env wire.Env) (*Transport, error) {
	set := &endpointSet{eps: make([]*endpoint, 0, len(addrs))}
	for _, a := range addrs {
		cc, err := grpc.NewClient(wire.Passthrough(a), dial...)
		if err != nil {
			_ = set.close()
			return nil, fmt.Errorf("producer: New(%q): %s: %w", target, a, err)
		}
		set.eps = append(set.eps, &endpoint{name: a, cc: cc, owned: cc})
	}
	return newTransport(set, nil, env), nil
}

// NewFromConn returns the transport of cc, which it does not own.
func NewFromConn(cc grpc.ClientConnInterface, env wire.Env) *Transport {
	name := ""
	if c, ok := cc.(interface{ Target() string }); ok {
		name = c.Target()
	}
	return newTransport(&endpointSet{eps: []*endpoint{{name: name, cc: cc}}}, nil, env)
}

// NewResolved returns the transport of a target with a scheme
// (targets.go): resolved by the builder of its scheme among resolvers,
// else gRPC's registry, each endpoint dialled with dial. A bad target is a
// *wire.TargetError.
func NewResolved(target string, resolvers []resolver.Builder, dial []grpc.DialOption, env wire.Env) (*Transport, error) {
	t, err := newTargetResolver(target, resolvers, dial)
	if err != nil {
		return nil, err
	}
	return newTransport(nil, t, env), nil
}

// Refuse takes every valid message.
func (t *Transport) Refuse(message.Message) error { return nil }

// Prepare gives m an ID when it has none.
func (t *Transport) Prepare(m message.Message) (string, error) {
	if m.ID == "" {
		return t.ids.Next(), nil
	}
	return m.ID, nil
}

// FindPin finds name among the connections: for a target with a scheme,
// the resolver's endpoints now, held for the send (Send releases them).
func (t *Transport) FindPin(ctx context.Context, _, name string) (*send.Pin, error) {
	set := t.eps
	if t.targets != nil {
		// A resolver that has not answered is waited for as an attempt
		// waits for it, not beyond Close.
		actx, cancel := context.WithTimeout(ctx, t.env.Cfg.AttemptTimeout)
		stop := context.AfterFunc(t.env.HardCtx, cancel)
		s, err := t.targets.acquire(actx)
		stop()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("producer: Resend: %w", err)
		}
		set = s
	}
	for i, e := range set.eps {
		if e.name == name {
			pn := &send.Pin{EP: i, At: name}
			if t.targets != nil {
				pn.Hold = set
			}
			return pn, nil
		}
	}
	if t.targets != nil {
		t.targets.release(set)
	}
	return nil, nil
}

// EndpointNames lists the endpoints now.
func (t *Transport) EndpointNames() []string {
	set := t.eps
	if t.targets != nil {
		if set = t.targets.tryAcquire(); set == nil {
			return nil
		}
		defer t.targets.release(set)
	}
	names := make([]string, len(set.eps))
	for i, e := range set.eps {
		names[i] = e.name
	}
	return names
}

// Close closes the connections New made (and a target's resolver), once.
func (t *Transport) Close(context.Context, time.Duration) error {
	var errs []error
	if t.eps != nil {
		errs = append(errs, t.eps.close())
	}
	if t.targets != nil {
		errs = append(errs, t.targets.close())
	}
	return errors.Join(errs...)
}
