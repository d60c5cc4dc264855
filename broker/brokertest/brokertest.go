// Package brokertest starts a rocketry test broker for a test, in the
// spirit of net/http/httptest.
package brokertest

import (
	"testing"

	"github.com/rocketry-go/rocketry/broker"
)

// Start starts a broker configured by opts on 127.0.0.1:0 and stops it in
// t's cleanup. It calls t.Fatal when the options are invalid or the broker
// cannot listen. Use the broker's Addr to dial it, and its SetFaults,
// SetThrottle, Restart, DropConnections and Stats to control and watch it.
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
