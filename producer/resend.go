package producer

import (
	"context"
	"errors"
	"fmt"

	"github.com/rocketry-go/rocketry/producer/internal/send"
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
func (p *Producer) pinFor(ctx context.Context, m *Message, at string) (*send.Pin, error) {
	pn, err := p.tr.FindPin(ctx, m.Topic, at)
	switch {
	case err != nil:
		return nil, explainProtocol(err)
	case pn == nil && !p.cfg.FailoverAlways:
		return nil, fmt.Errorf("%w: message %q, endpoint %q (this producer has %v; WithFailoverOnUnknownOutcome sends it elsewhere)",
			ErrEndpointUnknown, m.ID, at, p.tr.EndpointNames())
	}
	return pn, nil
}
