package wirev1

import (
	"google.golang.org/grpc"

	"github.com/rocketry-go/rocketry/producer/internal/pace"
	"github.com/rocketry-go/rocketry/producer/internal/send"
)

// This file lets the producer's tests, which drive a Producer over this
// transport, look at the endpoints' state: when a broker was last reached,
// its pacers, a resolved endpoint's connection. Nothing else calls it.

// FixedReach is when endpoint ep of a host:port list (or NewFromConn's
// connection) was last reached; nil for a target with a scheme.
func (t *Transport[R]) FixedReach(ep int) *send.Reach {
	if t.eps == nil {
		return nil
	}
	return &t.eps.at(ep).reach
}

// FixedPacers is the pacers of endpoint ep of a host:port list (or
// NewFromConn's connection); nil for a target with a scheme.
func (t *Transport[R]) FixedPacers(ep int) *pace.Pacers {
	if t.eps == nil {
		return nil
	}
	return &t.eps.at(ep).pace
}

// ResolvedConn is the connection the producer owns to endpoint ep of a
// target's current endpoints, held and released for the look; ok is false
// when there are none (or the target has no scheme).
func (t *Transport[R]) ResolvedConn(ep int) (cc *grpc.ClientConn, ok bool) {
	if t.targets == nil {
		return nil, false
	}
	s := t.targets.tryAcquire()
	if s == nil {
		return nil, false
	}
	defer t.targets.release(s)
	return s.at(ep).owned, true
}

// Live reports whether the resolved endpoint named name has a connection
// (one the resolver gives, or one a send still holds).
func (t *Transport[R]) Live(name string) bool {
	if t.targets == nil {
		return false
	}
	t.targets.mu.Lock()
	defer t.targets.mu.Unlock()
	_, live := t.targets.live[name]
	return live
}
