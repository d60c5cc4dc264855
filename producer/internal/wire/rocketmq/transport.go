package wirermq

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/message"
	"github.com/rocketry-go/rocketry/producer/internal/batch"
	"github.com/rocketry-go/rocketry/producer/internal/send"
	"github.com/rocketry-go/rocketry/producer/internal/wire"
	"github.com/rocketry-go/rocketry/senderr"
)

// Transport is apache.rocketmq.v2 (a wire.Transport, and
// wire.Transactions): the RocketMQ 5 client, which makes the IDs.
type Transport struct {
	c    *rmqClient
	cfg  *send.Config  // the Producer's policy, set by Start
	next atomic.Uint32 // round robin over the queues of a route for first attempts
}

// New makes the transport of the access points addrs (host:port each)
// from the producer's configuration. It makes no call: Start does.
func New(addrs []string, cfg Config) (*Transport, error) {
	c, err := newRMQClient(addrs, cfg)
	if err != nil {
		return nil, err
	}
	return &Transport{c: c}, nil
}

// Start starts the client (a telemetry stream to every access point,
// heartbeats, route refreshes) and returns once a server has answered
// with its Settings, within the attempt timeout and ctx; sends then run
// with the policy of env. When it fails, every goroutine of the client
// has ended. An access point that could not be reached is a
// *senderr.ConnectError in its error.
func (t *Transport) Start(ctx context.Context, env wire.Env) error {
	t.cfg = env.Cfg
	return t.c.start(ctx)
}

// ServerSchedule is the throttle schedule of WithServerRetryPolicy: the
// waits of the server's latest backoff_policy, or fallback while the
// server has sent none that can be read.
func (t *Transport) ServerSchedule(fallback backoff.Schedule) backoff.Schedule {
	return serverSchedule{c: t.c, fallback: fallback}
}

// Refuse refuses a transactional message: over RocketMQ 5 it is a half
// message (BeginTransaction).
func (t *Transport) Refuse(m message.Message) error {
	if m.Transactional {
		return fmt.Errorf("%w: over apache.rocketmq.v2 a transactional message is a half message of a transaction: send it with Producer.BeginTransaction and Transaction.Send", senderr.ErrInvalidMessage)
	}
	return nil
}

// Prepare checks the server's max_body_size and gives m an ID when it has
// none.
func (t *Transport) Prepare(m message.Message) (string, error) {
	// The server's max_body_size (its Settings): refused here, before any
	// attempt, as every invalid message is; the attempt's own check stays
	// for Settings that shrink while a send is under way.
	if n := t.c.maxBodySize(); n > 0 && len(m.Body) > n {
		return m.ID, fmt.Errorf("%w: body is %d bytes, over the server's max_body_size of %d", senderr.ErrInvalidMessage, len(m.Body), n)
	}
	if m.ID == "" {
		return t.c.ids.next(), nil
	}
	return m.ID, nil
}

// Send runs the executor over apache.rocketmq.v2: first attempts go round
// robin over the queues of the topic's route.
func (t *Transport) Send(ctx context.Context, wm message.Message, bt *batch.Batcher, pn *send.Pin) (*message.Receipt, *senderr.SendError) {
	c := t.c.newWireCall(wm)
	c.bt = bt
	if pn != nil {
		if r, ok := pn.Hold.(*rmqRoute); ok {
			c.route = r // the route pn.EP indexes, for the whole send
		}
	}
	c.x.Init(t.cfg, c, send.Facts{ID: wm.ID, EP: int(t.next.Add(1)), Group: wm.MessageGroup, Pin: pn})
	if f := wire.Run(ctx, &c.x); f != nil {
		return nil, f
	}
	q, off, _, _ := c.result()
	return &message.Receipt{MessageID: wm.ID, QueueID: q, Offset: off, Attempts: c.x.Attempts(), RecallHandle: c.recallHandle()}, nil
}

// FindPin finds a queue of the broker of that name and endpoints in
// topic's route (read, from the cache or the server, for it; see
// findRMQPin).
func (t *Transport) FindPin(ctx context.Context, topic, name string) (*send.Pin, error) {
	r, err := t.c.route(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("producer: Resend: route of topic %q: %w", topic, err)
	}
	return findRMQPin(r, name), nil
}

// EndpointNames lists the brokers of the routes read so far.
func (t *Transport) EndpointNames() []string {
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

// Close sends NotifyClientTermination, within ctx while it lasts (else on
// its own timeout), then ends every goroutine and connection of the client.
func (t *Transport) Close(ctx context.Context, timeout time.Duration) error {
	base := context.Background()
	if ctx.Err() == nil {
		base = ctx
	}
	nctx, cancel := context.WithTimeout(base, timeout)
	t.c.close(nctx)
	cancel()
	return nil
}
