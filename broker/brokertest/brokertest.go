// Package brokertest starts rocketry test brokers for a test, in the
// spirit of net/http/httptest: one broker (Start) or a cluster whose
// apache.rocketmq.v2 routes list every broker (StartCluster).
package brokertest

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/rocketry-go/rocketry/broker"
)

// Start starts a broker configured by opts on 127.0.0.1:0 and stops it in
// t's cleanup. It calls t.Fatal when the options are invalid or the broker
// cannot listen. Use the broker's Addr to dial it (rocketry.v1 and
// apache.rocketmq.v2 clients alike), and its SetFaults, SetThrottle,
// Restart, DropConnections and Stats to control and watch it.
func Start(t testing.TB, opts ...broker.Option) *broker.Broker {
	t.Helper()
	b, err := broker.New(opts...)
	if err != nil {
		t.Fatalf("brokertest.Start: %v", err)
		return nil
	}
	if err := b.Start("127.0.0.1:0"); err != nil {
		t.Fatalf("brokertest.Start: %v", err)
		return nil
	}
	t.Cleanup(b.Stop)
	return b
}

// StartCluster starts n brokers configured by opts, each on 127.0.0.1:0,
// named "broker-0" to "broker-(n-1)", whose apache.rocketmq.v2 QueryRoute
// answers list the queues of all n (each broker first in its own answer).
// The brokers share nothing else: each has its own store, throttling and
// faults. It stops them in t's cleanup and calls t.Fatal as Start does; n
// must be at least 1. Options naming the broker or its peers are
// overridden.
func StartCluster(t testing.TB, n int, opts ...broker.Option) []*broker.Broker {
	t.Helper()
	if n < 1 {
		t.Fatalf("brokertest.StartCluster: n = %d; want at least 1", n)
		return nil
	}
	var peers atomic.Pointer[[]broker.Peer]
	peers.Store(&[]broker.Peer{})
	route := func() []broker.Peer { return *peers.Load() }
	bs := make([]*broker.Broker, n)
	all := make([]broker.Peer, n)
	for i := range bs {
		name := fmt.Sprintf("broker-%d", i)
		bs[i] = Start(t, append(opts[:len(opts):len(opts)], broker.WithBrokerName(name), broker.WithRoutePeers(route))...)
		if bs[i] == nil {
			return nil
		}
		all[i] = broker.Peer{Name: name, Addr: bs[i].Addr()}
	}
	peers.Store(&all)
	return bs
}
