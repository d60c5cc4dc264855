package producer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/rocketry-go/rocketry/producer/internal/wire"
)

// ErrEndpointUnknown is returned by Resend, without an attempt, for a dead
// letter that may be stored on an endpoint (DeadLetter.MaybeStoredAt) this
// Producer does not send to, unless it was made with
// WithFailoverOnUnknownOutcome: sending it elsewhere could store it twice.
var ErrEndpointUnknown = errors.New("producer: dead letter may be stored on an endpoint this producer does not have")

// Resend sends a dead letter again, as a replay does: it is Send with the
// rule of a retry after an unknown outcome. A dead letter that may be
// stored somewhere (d.MaybeStoredAt) is sent to that endpoint, whose broker
// recognises its ID, and stays there for every retry, so that a replay
// never stores it on a second broker; with WithFailoverOnUnknownOutcome
// only its first attempt goes there (or, when this Producer does not have
// that endpoint, it is sent as by Send). Without that option, a dead
// letter pinned to an endpoint this Producer does not have fails at once
// with an error wrapping ErrEndpointUnknown. A dead letter with no
// MaybeStoredAt is sent as by Send.
//
// d.Message must have an ID (the one it was first sent with). A failed
// resend is handed to the Producer's dead-letter sink, as a failed Send
// is, its SendError.MaybeStoredAt naming the pin when no attempt of the
// resend had an unknown outcome. When the pin cannot be found
// (ErrEndpointUnknown; ErrNoEndpoints when a target's resolver gives none
// within the attempt timeout; a RocketMQ 5 route that cannot be read),
// Resend refuses the send as it refuses an invalid message: it returns
// that error without any attempt, hook call or dead-letter hand-off, and
// the dead letter stays wherever the caller keeps it.
//
// Over RocketMQ 5 the pin is a broker's name and endpoints
// ("broker-a@host:port"): a broker of that name at other addresses is
// refused as an endpoint this Producer does not have. A RocketMQ 5 broker
// does not deduplicate by message ID, so a resend of a message that was
// stored stores a second copy wherever it goes; and through a proxy in
// cluster mode the pin names only the proxies and a broker name, since
// the proxy chooses the broker and queue of every request (see
// findRMQPin). The pin keeps a replay from a broker known not to hold the
// message; it cannot make the replay land where the first copy is.
func (p *Producer) Resend(ctx context.Context, d *DeadLetter) (*SendReceipt, error) {
	if d == nil || d.Message == nil {
		return nil, fmt.Errorf("%w: dead letter has no message", ErrInvalidMessage)
	}
	m := d.Message
	if m.ID == "" {
		return nil, fmt.Errorf("%w: dead letter's message has no ID (a replay could not be deduplicated)", ErrInvalidMessage)
	}
	return p.sendSync(ctx, m, d.MaybeStoredAt)
}

// pinFor returns the pin of a resend of m to the endpoint named at: nil
// when this Producer does not have it and may send elsewhere
// (WithFailoverOnUnknownOutcome), an error wrapping ErrEndpointUnknown when
// it may not.
func (p *Producer) pinFor(ctx context.Context, m *Message, at string) (*wire.Pin, error) {
	pn, err := p.tr.FindPin(ctx, m.Topic, at)
	switch {
	case err != nil:
		return nil, publicError(err)
	case pn == nil && !p.cfg.FailoverAlways:
		return nil, fmt.Errorf("%w: message %q, endpoint %q (this producer has %v; WithFailoverOnUnknownOutcome sends it elsewhere)",
			ErrEndpointUnknown, m.ID, at, p.tr.EndpointNames())
	}
	return pn, nil
}

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
func findRMQPin(r *rmqRoute, at string) *wire.Pin {
	name, addrs, full := splitPin(at)
	for i, q := range r.queues {
		if q.broker == name && (!full || sameAddrs(q.addr, addrs)) {
			return &wire.Pin{EP: i, At: at, Hold: r}
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
