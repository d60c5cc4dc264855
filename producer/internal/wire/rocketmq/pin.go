package wirermq

import (
	"slices"
	"strings"

	"github.com/rocketry-go/rocketry/producer/internal/send"
)

// findRMQPin returns the pin of a RocketMQ 5 resend to at in route r, nil
// when r has no such broker. at is a pin as rmqCall.pinName writes it, the
// broker's name and endpoints ("broker-a@h1:p1;h2:p2"): it matches a queue
// of the broker of that name whose endpoints are the same set of
// addresses. A broker of that name at other addresses is another broker
// (a new one that took the old one's name, or the same name in another
// cluster), which does not hold the message: it is no match, and Resend
// refuses the dead letter with ErrEndpointUnknown. A bare name (a dead
// letter written before the pin carried the endpoints) matches by name
// alone, as it always did.
//
// What a match promises depends on what is behind the endpoints. A broker
// that is its own endpoint (the bundled broker, or a proxy in local mode,
// where the route gives each broker its own proxy's address) is the one
// the pin names. A proxy in cluster mode gives every broker of a route the
// same endpoints, the access points the client used, and chooses the
// broker and queue of each request itself
// (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/route/RouteActivity.java,
// SendMessageActivity.java SendMessageQueueSelector): there the pin only
// names the proxy cluster and a broker name, and neither the resend nor a
// live retry can be kept on the broker that may hold the message.
func findRMQPin(r *rmqRoute, at string) *send.Pin {
	name, addrs, full := splitPin(at)
	for i, q := range r.queues {
		if q.broker == name && (!full || sameAddrs(q.addr, addrs)) {
			return &send.Pin{EP: i, At: at, Hold: r}
		}
	}
	return nil
}

// splitPin splits a RocketMQ 5 pin into the broker's name and its
// endpoints; full is false for a bare name. The endpoints are host:port
// each, which never hold an "@", so the last one splits.
func splitPin(at string) (name, addrs string, full bool) {
	i := strings.LastIndexByte(at, '@')
	if i < 0 {
		return at, "", false
	}
	return at[:i], at[i+1:], true
}

// sameAddrs reports whether two ";"-joined address lists hold the same
// addresses, in any order (as the official Go client compares Endpoints:
// golang/pkg/utils/utils.go CompareEndpoints).
func sameAddrs(a, b string) bool {
	x, y := strings.Split(a, ";"), strings.Split(b, ";")
	if len(x) != len(y) {
		return false
	}
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}
