package producer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// v1Transport is rocketry.v1 (transport.go): a fixed set of endpoints (a
// host:port list, NewFromConn's connection) or a target's resolver
// (targets.go), exactly one of the two.
type v1Transport struct {
	eps     *endpointSet    // rocketry.v1 to host:port endpoints: fixed (targets.go)
	targets *targetResolver // rocketry.v1 to a target with a scheme: resolved
	next    atomic.Uint32   // round robin over the endpoints for first attempts
	ids     *idGen
}

func newV1Transport(eps *endpointSet, targets *targetResolver) *v1Transport {
	return &v1Transport{eps: eps, targets: targets, ids: newIDGen()}
}

func (t *v1Transport) refuse(*Message) error { return nil }

func (t *v1Transport) prepare(m *Message) error {
	if m.ID == "" {
		m.ID = t.ids.next()
	}
	return nil
}

// findPin finds name among the connections: for a target with a scheme,
// the resolver's endpoints now, held for the send (send releases them).
func (t *v1Transport) findPin(ctx context.Context, p *Producer, _, name string) (*pin, error) {
	set := t.eps
	if t.targets != nil {
		// A resolver that has not answered is waited for as an attempt
		// waits for it, not beyond Close.
		actx, cancel := context.WithTimeout(ctx, p.cfg.AttemptTimeout)
		stop := context.AfterFunc(p.hardCtx, cancel)
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
			pn := &pin{ep: i, at: name}
			if t.targets != nil {
				pn.set = set
			}
			return pn, nil
		}
	}
	if t.targets != nil {
		t.targets.release(set)
	}
	return nil, nil
}

func (t *v1Transport) endpointNames() []string {
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

// close closes the connections New made (and a target's resolver), once.
func (t *v1Transport) close(context.Context, time.Duration) error {
	var errs []error
	if t.eps != nil {
		errs = append(errs, t.eps.close())
	}
	if t.targets != nil {
		errs = append(errs, t.targets.close())
	}
	return errors.Join(errs...)
}
