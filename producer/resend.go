package producer

import (
	"context"
	"errors"
	"fmt"
)

// ErrEndpointUnknown is returned by Resend, without an attempt, for a dead
// letter that may be stored on an endpoint (DeadLetter.MaybeStoredAt) this
// Producer does not send to, unless it was made with
// WithFailoverOnUnknownOutcome: sending it elsewhere could store it twice.
var ErrEndpointUnknown = errors.New("producer: dead letter may be stored on an endpoint this producer does not have")

// pin is where a resend starts and stays: endpoint ep, named at.
type pin struct {
	ep    int
	at    string
	route *rmqRoute    // RocketMQ 5: the route ep indexes
	set   *endpointSet // a target with a scheme: the endpoints ep indexes, held for the send
}

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
func (p *Producer) pinFor(ctx context.Context, m *Message, at string) (*pin, error) {
	pn, err := p.findPin(ctx, m.Topic, at)
	switch {
	case err != nil:
		return nil, err
	case pn == nil && !p.cfg.failoverAlways:
		return nil, fmt.Errorf("%w: message %q, endpoint %q (this producer has %v; WithFailoverOnUnknownOutcome sends it elsewhere)",
			ErrEndpointUnknown, m.ID, at, p.endpointNames())
	}
	return pn, nil
}

// findPin returns the endpoint named name (nil when there is none): one of the
// rocketry.v1 connections, or for RocketMQ 5 a queue of the broker of that
// name in topic's route (read, from the cache or the server, for it).
func (p *Producer) findPin(ctx context.Context, topic, name string) (*pin, error) {
	if p.rmq == nil {
		set := p.eps
		if p.targets != nil {
			// The resolver's endpoints now, held for the send (sendV1
			// releases them); a resolver that has not answered is waited
			// for as an attempt waits for it, not beyond Close.
			actx, cancel := context.WithTimeout(ctx, p.cfg.attemptTimeout)
			stop := context.AfterFunc(p.hardCtx, cancel)
			s, err := p.targets.acquire(actx)
			stop()
			cancel()
			if err != nil {
				return nil, fmt.Errorf("producer: Resend: %w", err)
			}
			set = s
		}
		for i, e := range set.eps {
			if e.name == name {
				pn := &pin{ep: i, at: name}
				if p.targets != nil {
					pn.set = set
				}
				return pn, nil
			}
		}
		if p.targets != nil {
			p.targets.release(set)
		}
		return nil, nil
	}
	r, err := p.rmq.route(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("producer: Resend: route of topic %q: %w", topic, err)
	}
	for i, q := range r.queues {
		if q.broker == name {
			return &pin{ep: i, at: name, route: r}, nil
		}
	}
	return nil, nil
}

// endpointNames lists where this Producer sends, for an error.
func (p *Producer) endpointNames() []string {
	if p.rmq == nil {
		set := p.eps
		if p.targets != nil {
			if set = p.targets.tryAcquire(); set == nil {
				return nil
			}
			defer p.targets.release(set)
		}
		names := make([]string, len(set.eps))
		for i, e := range set.eps {
			names[i] = e.name
		}
		return names
	}
	p.rmq.mu.Lock()
	defer p.rmq.mu.Unlock()
	seen := map[string]bool{}
	var names []string
	for _, r := range p.rmq.routes {
		for _, q := range r.queues {
			if !seen[q.broker] {
				seen[q.broker] = true
				names = append(names, q.broker)
			}
		}
	}
	return names
}
