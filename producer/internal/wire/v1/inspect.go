package wirev1

import (
	"github.com/rocketry-go/rocketry/producer/internal/pace"
	"github.com/rocketry-go/rocketry/producer/internal/send"
)

// This file lets the producer's tests, which drive a Producer over this
// transport, look at the endpoints' state: when a broker was last reached,
// its pacers. Nothing else calls it.

// FixedReach is when endpoint ep of a host:port list (or NewFromConn's
// connection) was last reached; nil for a target with a scheme.
func (t *Transport) FixedReach(ep int) *send.Reach {
	if t.eps == nil {
		return nil
	}
	return &t.eps.at(ep).reach
}

// FixedPacers is the pacers of endpoint ep of a host:port list (or
// NewFromConn's connection); nil for a target with a scheme.
func (t *Transport) FixedPacers(ep int) *pace.Pacers {
	if t.eps == nil {
		return nil
	}
	return &t.eps.at(ep).pace
}
