package wirermq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/producer/internal/pace"
	"github.com/rocketry-go/rocketry/senderr"
)

// rmqQueue is one writable queue of a topic.
type rmqQueue struct {
	id     int32
	broker string // the broker's name: the attempter's endpoint name
	// addr is the broker's endpoints: host:port, or several, sorted and
	// joined by ";", dialled as one connection (rmqClient.conn).
	addr string
}

// rmqRoute is the writable queues of a topic, interleaved so that
// consecutive indexes are on different brokers where there are several:
// endpoint ep of a send is queue ep % len(queues), and ep+1, the failover,
// is on another broker. A route is never empty and never changes; a
// refresh replaces it.
type rmqRoute struct {
	topic  string
	queues []rmqQueue
	// used is when a send last read the route (Unix nanoseconds of the
	// client's clock), shared by the routes that refreshes put in its
	// place; nil for a route not in the cache. refreshRoutes drops a topic
	// unused for topicIdle.
	used *atomic.Int64
}

// touch records a send's use of the route at now.
func (r *rmqRoute) touch(now time.Time) {
	if r.used != nil {
		r.used.Store(now.UnixNano())
	}
}

func (r *rmqRoute) queue(ep int) rmqQueue {
	i := ep % len(r.queues)
	if i < 0 {
		i += len(r.queues)
	}
	return r.queues[i]
}

// errNoWritableQueue is returned for a topic whose route has no writable
// queue of a leader broker.
var errNoWritableQueue = errors.New("producer: rocketmq topic has no writable queue")

// route returns the route of topic: from the cache, else from QueryRoute
// (one query at a time per topic; the others wait for it within ctx). A new
// topic is declared in the client's next Settings write (settingsLoop),
// which the send does not wait for.
func (c *rmqClient) route(ctx context.Context, topic string) (*rmqRoute, error) {
	for {
		c.mu.Lock()
		if r := c.routes[topic]; r != nil {
			c.mu.Unlock()
			return r, nil
		}
		if c.closed {
			c.mu.Unlock()
			return nil, senderr.ErrClosed
		}
		wait, busy := c.querying[topic]
		if !busy {
			wait = make(chan struct{})
			c.querying[topic] = wait
		}
		c.mu.Unlock()
		if busy {
			select {
			case <-wait:
				continue // cached now, or that query failed: try ours
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		r, err := c.queryRoute(ctx, topic)
		c.mu.Lock()
		delete(c.querying, topic)
		if err == nil {
			r.used = new(atomic.Int64)
			r.touch(c.now())
			c.routes[topic] = r
		}
		c.mu.Unlock()
		close(wait)
		if err != nil {
			return nil, err
		}
		c.settingsChanged()
		return r, nil
	}
}

// queryRoute asks the access points for topic's route, the next one after
// each gRPC error, each within the request timeout and ctx. A non-OK status
// is the answer (a *senderr.StatusError): it is not asked elsewhere.
func (c *rmqClient) queryRoute(ctx context.Context, topic string) (*rmqRoute, error) {
	req := &rocketmqv2.QueryRouteRequest{
		Topic:     &rocketmqv2.Resource{ResourceNamespace: c.set.Namespace, Name: topic},
		Endpoints: c.accessPoint,
	}
	c.mu.Lock()
	first := c.nextQuery
	c.nextQuery++
	c.mu.Unlock()
	var errs []error
	for i := range c.access {
		addr := c.access[(first+i)%len(c.access)]
		cn, err := c.conn(addr)
		if err != nil {
			return nil, err
		}
		qctx, cancel := context.WithTimeout(c.outgoing(ctx), c.timeout)
		resp, err := cn.stub.QueryRoute(qctx, req)
		cancel()
		if refused, _ := authRefusal(err); refused {
			return nil, c.authError(err, addr) // final, not asked elsewhere (auth.go)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		if s := resp.GetStatus(); s.GetCode() != rocketmqv2.Code_OK {
			return nil, c.authError(&senderr.StatusError{Code: int32(s.GetCode()), Message: s.GetMessage()}, addr)
		}
		queues := interleave(resp.GetMessageQueues())
		if len(queues) == 0 {
			return nil, fmt.Errorf("%w: %q", errNoWritableQueue, topic)
		}
		return &rmqRoute{topic: topic, queues: queues}, nil
	}
	return nil, fmt.Errorf("producer: rocketmq QueryRoute(%q): %w", topic, errors.Join(errs...))
}

// interleave keeps the queues a producer may write (WRITE or READ_WRITE,
// on a leader broker, id 0, with an address) and orders them broker by
// broker in turn: the first queue of each broker, then the second of each,
// and so on, brokers in the order the route first names them.
func interleave(mqs []*rocketmqv2.MessageQueue) []rmqQueue {
	var names []string
	byBroker := map[string][]rmqQueue{}
	total := 0
	for _, mq := range mqs {
		p := mq.GetPermission()
		b := mq.GetBroker()
		addrs := b.GetEndpoints().GetAddresses()
		if (p != rocketmqv2.Permission_WRITE && p != rocketmqv2.Permission_READ_WRITE) || b.GetId() != 0 || len(addrs) == 0 {
			continue
		}
		q := rmqQueue{id: mq.GetId(), broker: b.GetName(), addr: joinAddrs(addrs)}
		if _, ok := byBroker[q.broker]; !ok {
			names = append(names, q.broker)
		}
		byBroker[q.broker] = append(byBroker[q.broker], q)
		total++
	}
	out := make([]rmqQueue, 0, total)
	for i := 0; len(out) < total; i++ {
		for _, n := range names {
			if qs := byBroker[n]; i < len(qs) {
				out = append(out, qs[i])
			}
		}
	}
	return out
}

// joinAddrs is the endpoints of a broker as rmqQueue.addr names them: each
// address as host:port, sorted and joined by ";", so that a route that
// lists them in another order names the same connection (which shuffles
// them anyway: multiAddrTarget).
func joinAddrs(addrs []*rocketmqv2.Address) string {
	parts := make([]string, len(addrs))
	for i, a := range addrs {
		parts[i] = net.JoinHostPort(a.GetHost(), strconv.Itoa(int(a.GetPort())))
	}
	slices.Sort(parts)
	return strings.Join(slices.Compact(parts), ";")
}

// refreshRoutes drops the topics no send has read for topicIdle (their
// routes, their pacers and their place in Settings: dropIdle), then
// queries the route of every other cached topic again, refreshWorkers at
// a time, holding no lock while it queries: a send reads the route it
// has meanwhile. A topic whose query fails keeps its route. The official
// Java client refreshes every cached topic every 30 s and never drops one
// (rocketmq-clients'
// java/client/src/main/java/org/apache/rocketmq/client/java/impl/ClientImpl.java
// updateRouteCache, which starts every topic's query at once); here a
// service's thousands of per-tenant topics cost only the recent ones.
func (c *rmqClient) refreshRoutes() {
	topics := c.dropIdle()
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(max(c.refreshWorkers, 1), len(topics)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range work {
				c.refreshRoute(t)
			}
		}()
	}
feed:
	for _, t := range topics {
		select {
		case work <- t:
		case <-c.ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
}

// refreshRoute queries topic's route again and puts it in the cache,
// unless the topic was dropped meanwhile.
func (c *rmqClient) refreshRoute(topic string) {
	r, err := c.queryRoute(c.ctx, topic)
	if err != nil {
		c.logger.Debug("rocketmq: route refresh failed", "topic", topic, "err", err)
		return
	}
	c.mu.Lock()
	if old := c.routes[topic]; old != nil {
		r.used = old.used
		c.routes[topic] = r
	}
	c.mu.Unlock()
}

// dropIdle drops every topic that no send has read for topicIdle: its
// route, its pacer at each broker of the route, and (by the next Settings
// write) its place in Settings. A later send reads its route again. It
// returns the topics kept.
func (c *rmqClient) dropIdle() []string {
	before := c.now().Add(-c.topicIdle).UnixNano()
	var gone []*rmqRoute
	c.mu.Lock()
	kept := make([]string, 0, len(c.routes))
	for t, r := range c.routes {
		if r.used.Load() < before {
			delete(c.routes, t)
			gone = append(gone, r)
			continue
		}
		kept = append(kept, t)
	}
	c.mu.Unlock()
	if len(gone) == 0 {
		return kept
	}
	for _, r := range gone {
		for _, q := range r.queues {
			if p, ok := c.pacers.Load(q.broker); ok {
				p.(*pace.Pacers).Forget(r.topic)
			}
		}
	}
	c.logger.Debug("rocketmq: idle topics dropped", "topics", len(gone))
	c.settingsChanged()
	return kept
}
