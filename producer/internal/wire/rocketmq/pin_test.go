package wirermq

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRmqPinSplit: a pin's broker name and endpoints (the rest of
// TestRmqPinAddressSet, producer's, which resends to them).
func TestRmqPinSplit(t *testing.T) {
	name, addrs, full := splitPin("broker@x@10.0.0.1:1;10.0.0.2:2")
	assert.Equal(t, []any{"broker@x", "10.0.0.1:1;10.0.0.2:2", true}, []any{name, addrs, full}, "a name may hold an @, an address never does")
	assert.True(t, sameAddrs("10.0.0.2:2;10.0.0.1:1", "10.0.0.1:1;10.0.0.2:2"))
	assert.False(t, sameAddrs("10.0.0.1:1", "10.0.0.1:1;10.0.0.2:2"))
}
