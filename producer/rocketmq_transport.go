package producer

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rocketry-go/rocketry/producer/internal/batch"
	"github.com/rocketry-go/rocketry/producer/internal/send"
)

// rmqTransport is apache.rocketmq.v2 (transport.go): the RocketMQ 5
// client, which makes the IDs.
type rmqTransport struct {
	c    *rmqClient
	next atomic.Uint32 // round robin over the queues of a route for first attempts
}

func (t *rmqTransport) refuse(m *Message) error {
	if m.Transactional {
		return fmt.Errorf("%w: over %v a transactional message is a half message of a transaction: send it with Producer.BeginTransaction and Transaction.Send", ErrInvalidMessage, RocketMQ5)
	}
	return nil
}

func (t *rmqTransport) prepare(m *Message) error {
	// The server's max_body_size (its Settings): refused here, before any
	// attempt, as every invalid message is; the attempt's own check stays
	// for Settings that shrink while a send is under way.
	if n := t.c.maxBodySize(); n > 0 && len(m.Body) > n {
		return fmt.Errorf("%w: body is %d bytes, over the server's max_body_size of %d", ErrInvalidMessage, len(m.Body), n)
	}
	if m.ID == "" {
		m.ID = t.c.ids.next()
	}
	return nil
}

// send runs the executor over apache.rocketmq.v2: first attempts go round
// robin over the queues of the topic's route.
func (t *rmqTransport) send(ctx context.Context, p *Producer, m *Message, bt *batch.Batcher, pn *pin) (*SendReceipt, *SendError) {
	c := t.c.newCall(m)
	c.bt = bt
	x := send.Executor{Cfg: &p.cfg.Config, A: c, ID: m.ID, EP: int(t.next.Add(1))}
	if pn != nil && pn.route != nil {
		c.route = pn.route // the route pn.ep indexes, for the whole send
	}
	fifo(&x, m)
	pinTo(&x, pn)
	if se := runSend(ctx, &x); se != nil {
		return nil, se
	}
	q, off, _, _ := c.result()
	return &SendReceipt{MessageID: m.ID, QueueID: q, Offset: off, Attempts: x.Attempts(), RecallHandle: c.recallHandle()}, nil
}

// findPin finds a queue of the broker of that name and endpoints in
// topic's route (read, from the cache or the server, for it; see
// findRMQPin).
func (t *rmqTransport) findPin(ctx context.Context, _ *Producer, topic, name string) (*pin, error) {
	r, err := t.c.route(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("producer: Resend: route of topic %q: %w", topic, err)
	}
	return findRMQPin(r, name), nil
}

func (t *rmqTransport) endpointNames() []string {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	seen := map[string]bool{}
	var names []string
	for _, r := range t.c.routes {
		for _, q := range r.queues {
			if n := q.broker + "@" + q.addr; !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	return names
}

// close sends NotifyClientTermination, within ctx while it lasts (else on
// its own timeout), then ends every goroutine and connection of the client.
func (t *rmqTransport) close(ctx context.Context, timeout time.Duration) error {
	base := context.Background()
	if ctx.Err() == nil {
		base = ctx
	}
	nctx, cancel := context.WithTimeout(base, timeout)
	t.c.close(nctx)
	cancel()
	return nil
}

// rmqOf returns the RocketMQ 5 client of p, for what only RocketMQ 5 has
// (BeginTransaction, Recall, a transaction's half messages): ok is false
// over rocketry.v1, whose callers return ErrNotRocketMQ5.
func rmqOf(p *Producer) (*rmqTransport, bool) {
	t, ok := p.tr.(*rmqTransport)
	return t, ok
}
