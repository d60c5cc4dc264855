package broker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// Transactional messages on the apache.rocketmq.v2 face, as a RocketMQ 5
// broker keeps them: a SendMessage of TRANSACTION messages stores them as
// half messages of one transaction, invisible to every consumer (the
// broker keeps them in its RMQ_SYS_TRANS_HALF_TOPIC, see
// broker/src/main/java/org/apache/rocketmq/broker/transaction/queue/TransactionalMessageBridge.java),
// until EndTransaction commits them (they join their queue, or the timer
// when they carry a delivery time still to come) or rolls them back (they
// are dropped). A transaction neither committed nor rolled back is checked
// (WithTransactionCheck), as TransactionalMessageCheckService and
// TransactionalMessageServiceImpl.check do
// (broker/src/main/java/org/apache/rocketmq/broker/transaction/).

// Default transaction check, as a RocketMQ 5 broker's BrokerConfig sets
// it: transactionCheckInterval 30 s, transactionCheckMax 15.
const (
	DefaultTransactionCheckInterval = 30 * time.Second
	DefaultTransactionCheckMax      = 15
)

// txCheckConfig is WithTransactionCheck's setting.
type txCheckConfig struct {
	interval time.Duration
	max      int
}

// WithTransactionCheck sets how the broker checks an orphaned transaction:
// one whose half messages were neither committed nor rolled back within
// interval of their send. It sends a RecoverOrphanedTransactionCommand,
// with the transaction's first message and its transaction_id, on the
// Telemetry stream of a connected producer (one whose Settings publish the
// topic, else any producer), and applies the EndTransaction the producer
// answers with (source SOURCE_SERVER_CHECK); it checks again every
// interval while the transaction stays open, maxChecks times, then rolls
// it back: the real broker discards a half message checked
// transactionCheckMax times (TransactionalMessageServiceImpl.needDiscard,
// then resolveDiscardMsg moves it to TRANS_CHECK_MAX_TIME_TOPIC, never
// delivered). A check with no producer connected counts all the same, as
// it does for the real broker. The defaults are the broker's:
// DefaultTransactionCheckInterval and DefaultTransactionCheckMax (the real
// broker's first check also waits for transactionTimeOut, 6 s; here the
// interval is both). An interval under 1 ms or maxChecks under 1 is an
// error.
func WithTransactionCheck(interval time.Duration, maxChecks int) Option {
	return optionFunc(func(c *config) error {
		if interval < time.Millisecond || maxChecks < 1 {
			return errorf("WithTransactionCheck(%v, %d): want an interval of 1ms or more and maxChecks of 1 or more", interval, maxChecks)
		}
		c.txCheck = txCheckConfig{interval: interval, max: maxChecks}
		return nil
	})
}

// txStart is a SendMessage's new transaction: its id and the client that
// sent it.
type txStart struct {
	id       string
	client   string
	interval time.Duration // until the first check
}

// halfTx is an open transaction: its half messages, all of one topic and
// one queue, and its check state.
type halfTx struct {
	id        string
	client    string
	queue     int
	msgs      []*rocketryv1.Message
	extras    []*msgExtra
	nextCheck time.Time
	checks    int
}

// txSeq numbers the broker's transaction ids.
var txSeq atomic.Uint64

// newTxStart makes the transaction of a SendMessage request whose first
// message is a TRANSACTION message; nil for any other request.
func (b *Broker) newTxStart(ctx context.Context, in []*rocketmqv2.Message) *txStart {
	if len(in) == 0 || messageTypeOf(in[0].GetSystemProperties()) != rocketmqv2.MessageType_TRANSACTION {
		return nil
	}
	return &txStart{
		id:       fmt.Sprintf("%016X%08X", uint64(b.now().UnixNano()), txSeq.Add(1)),
		client:   clientID(ctx),
		interval: b.cfg.txCheck.interval,
	}
}

// clientID is the x-mq-client-id header of a call, "" without one.
func clientID(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-mq-client-id"); len(v) > 0 {
		return v[0]
	}
	return ""
}

// holdLocked keeps m, for queue q, as a half message of transaction tx.
func (t *topic) holdLocked(tx *txStart, q int, m *rocketryv1.Message, x *msgExtra, now time.Time) {
	if t.half == nil {
		t.half = map[string]*halfTx{}
	}
	h := t.half[tx.id]
	if h == nil {
		h = &halfTx{id: tx.id, client: tx.client, queue: q}
		t.half[tx.id] = h
	}
	m.Topic = t.name
	h.msgs = append(h.msgs, m)
	h.extras = append(h.extras, x)
	h.nextCheck = now.Add(tx.interval)
}

// commitTxLocked makes the half messages of h visible: each joins h's queue,
// or the timer when its delivery time is after now. It returns how many.
func (t *topic) commitTxLocked(h *halfTx, now time.Time, ttl time.Duration) int64 {
	t.promoteLocked(now)
	var inQueues, copies int64
	for i, m := range h.msgs {
		_, inQueue, copied := t.placeLocked(h.queue, m, h.extras[i], now, ttl)
		if inQueue {
			inQueues++
		}
		if copied {
			copies++
		}
	}
	t.stored += inQueues
	t.copies += copies
	for _, g := range t.groups {
		g.backlog += inQueues
	}
	if inQueues > 0 {
		t.notifyLocked()
	}
	return int64(len(h.msgs))
}

// endTx commits or rolls back transaction id of topic t; false when it is
// not open.
func (b *Broker) endTx(t *topic, id string, commit bool) bool {
	l := b.throttle.limits()
	now := b.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.half[id]
	if h == nil {
		return false
	}
	delete(t.half, id)
	if commit {
		b.stored.Add(t.commitTxLocked(h, now, b.cfg.dedupTTL))
		b.throttle.backlogChangedLocked(t, l, now)
	}
	return true
}

// EndTransaction commits or rolls back an open transaction, as the proxy
// answers it
// (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/transaction/EndTransactionActivity.java):
// an invalid topic is 40002 ILLEGAL_TOPIC, a blank transaction_id 40008
// INVALID_TRANSACTION_ID; a transaction the proxy has no data for
// (unknown, or ended already) is 50001 INTERNAL_SERVER_ERROR "cannot
// found transaction data" (TransactionProcessor's
// TRANSACTION_DATA_NOT_FOUND, which GrpcProxyException maps to no other
// code). A COMMIT makes the half messages visible, a ROLLBACK drops them,
// and either answers OK; any other resolution answers OK and leaves the
// transaction open, as the broker ignores an end of TRANSACTION_NOT_TYPE:
// the check resolves it. The source (the client, or the server's check)
// does not matter.
func (s rocketmqServer) EndTransaction(ctx context.Context, req *rocketmqv2.EndTransactionRequest) (*rocketmqv2.EndTransactionResponse, error) {
	b := s.b
	name := req.GetTopic().GetName()
	if r := checkRocketMQTopic(name); r != nil {
		return &rocketmqv2.EndTransactionResponse{Status: v2Status(rocketmqv2.Code_ILLEGAL_TOPIC, r.msg)}, nil
	}
	id := req.GetTransactionId()
	if blank(id) {
		return &rocketmqv2.EndTransactionResponse{Status: v2Status(rocketmqv2.Code_INVALID_TRANSACTION_ID, "transaction id cannot be empty")}, nil
	}
	notFound := &rocketmqv2.EndTransactionResponse{Status: v2Status(rocketmqv2.Code_INTERNAL_SERVER_ERROR, "cannot found transaction data")}
	t := b.lookupTopic(name)
	if t == nil {
		return notFound, nil
	}
	switch req.GetResolution() {
	case rocketmqv2.TransactionResolution_COMMIT, rocketmqv2.TransactionResolution_ROLLBACK:
		if !b.endTx(t, id, req.GetResolution() == rocketmqv2.TransactionResolution_COMMIT) {
			return notFound, nil
		}
	default:
		t.mu.Lock()
		open := t.half[id] != nil
		t.mu.Unlock()
		if !open {
			return notFound, nil
		}
	}
	return &rocketmqv2.EndTransactionResponse{Status: v2OK()}, nil
}

// HalfMessages returns copies of the half messages of topic's open
// transactions, by transaction id then send order, each with the queue it
// will join and offset -1; nil for an unknown topic. Messages does not
// list them. It is meant for tests' invariant checks.
func (b *Broker) HalfMessages(topicName string) []*rocketryv1.ReceivedMessage {
	t := b.lookupTopic(topicName)
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := make([]string, 0, len(t.half))
	for id := range t.half {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var out []*rocketryv1.ReceivedMessage
	for _, id := range ids {
		h := t.half[id]
		for _, m := range h.msgs {
			out = append(out, &rocketryv1.ReceivedMessage{
				Message: proto.Clone(m).(*rocketryv1.Message), QueueId: int32(h.queue), Offset: -1,
			})
		}
	}
	return out
}

// telemetryPeer is an open Telemetry stream: its client, the topics its
// Settings publish, and where to send it commands.
type telemetryPeer struct {
	client string
	topics map[string]struct{} // a set: pick asks it of every peer
	out    chan *rocketmqv2.TelemetryCommand
}

// telemetryPeers are the broker's open Telemetry streams of producers.
type telemetryPeers struct {
	mu    sync.Mutex
	peers map[*telemetryPeer]struct{}
}

func (p *telemetryPeers) add(peer *telemetryPeer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.peers == nil {
		p.peers = map[*telemetryPeer]struct{}{}
	}
	p.peers[peer] = struct{}{}
}

func (p *telemetryPeers) remove(peer *telemetryPeer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.peers, peer)
}

// pick is the stream to check a transaction of topic on: the sender's
// own, else one whose Settings publish topic, else any; nil without any.
func (p *telemetryPeers) pick(client, topic string) *telemetryPeer {
	p.mu.Lock()
	defer p.mu.Unlock()
	var pub, anyPeer *telemetryPeer
	for peer := range p.peers {
		switch {
		case client != "" && peer.client == client:
			return peer
		case pub == nil && hasTopic(peer.topics, topic):
			pub = peer
		case anyPeer == nil:
			anyPeer = peer
		}
	}
	if pub != nil {
		return pub
	}
	return anyPeer
}

func hasTopic(set map[string]struct{}, topic string) bool {
	_, ok := set[topic]
	return ok
}

// update sets the topics of peer from its producer's new Settings, made
// outside the lock that pick takes: the work is that of reading the
// Settings once, O(1) per topic in them, and a producer writes them
// again only when its topics change, coalesced (rocketry's own client:
// producer/internal/wire/rocketmq settingsLoop).
func (p *telemetryPeers) update(peer *telemetryPeer, st *rocketmqv2.Settings) {
	topics := publishedTopics(st)
	p.mu.Lock()
	defer p.mu.Unlock()
	peer.topics = topics
}

// publishedTopics is the set of topics a producer's Settings publish.
func publishedTopics(st *rocketmqv2.Settings) map[string]struct{} {
	rs := st.GetPublishing().GetTopics()
	out := make(map[string]struct{}, len(rs))
	for _, r := range rs {
		out[r.GetName()] = struct{}{}
	}
	return out
}

// newTelemetryPeer registers the Telemetry stream of a producer whose
// Settings are st; nil for another client (a consumer is never asked to
// check a transaction).
func (b *Broker) newTelemetryPeer(ctx context.Context, st *rocketmqv2.Settings) *telemetryPeer {
	pub := st.GetPublishing()
	if pub == nil {
		return nil
	}
	peer := &telemetryPeer{client: clientID(ctx), topics: publishedTopics(st), out: make(chan *rocketmqv2.TelemetryCommand, 64)}
	b.telemetry.add(peer)
	return peer
}

// startTxChecker starts the transaction checker, once, when the first half
// message is held; it stops with the broker.
func (b *Broker) startTxChecker() {
	b.txCheckerOnce.Do(func() {
		if !b.trackStream() {
			return
		}
		go func() {
			defer b.streams.Done()
			b.runTxChecker()
		}()
	})
}

// runTxChecker checks the open transactions due for a check every tick
// (a quarter of the interval, 5 ms to 1 s) until the broker stops.
func (b *Broker) runTxChecker() {
	tick := min(max(b.cfg.txCheck.interval/4, 5*time.Millisecond), time.Second)
	tk := time.NewTicker(tick)
	defer tk.Stop()
	for {
		select {
		case <-b.stopCh:
			return
		case <-tk.C:
			b.checkTransactions()
		}
	}
}

// txCheck is a check to send.
type txCheck struct {
	client string
	cmd    *rocketmqv2.TelemetryCommand
	topic  string
}

// checkTransactions rolls back the open transactions checked
// maxChecks times already and due again, and sends a check for the other
// due ones.
func (b *Broker) checkTransactions() {
	now := b.now()
	b.topicsMu.RLock()
	topics := make([]*topic, 0, len(b.topics))
	for _, t := range b.topics {
		topics = append(topics, t)
	}
	b.topicsMu.RUnlock()
	var checks []txCheck
	for _, t := range topics {
		t.mu.Lock()
		for id, h := range t.half {
			if now.Before(h.nextCheck) {
				continue
			}
			if h.checks >= b.cfg.txCheck.max {
				delete(t.half, id)
				b.log.Debug("broker: transaction rolled back after its last check", "topic", t.name, "transaction_id", id, "checks", h.checks)
				continue
			}
			h.checks++
			h.nextCheck = now.Add(b.cfg.txCheck.interval)
			m := v2Message(t.name, popped{msg: h.msgs[0], extra: h.extras[0], queue: h.queue, offset: -1})
			m.SystemProperties.ReceiptHandle = nil
			m.SystemProperties.DeliveryAttempt = nil
			m.SystemProperties.MessageType = rocketmqv2.MessageType_TRANSACTION
			// As Apache's broker does, the check's half message carries the
			// transaction's ID and the number of this check among its
			// properties, which the proxy hands back as user properties
			// (MessageConst.STRING_HASH_SET lacks both:
			// broker/.../transaction/queue/TransactionalMessageServiceImpl.java
			// needDiscard; proxy/.../grpc/v2/common/GrpcConverter.java
			// buildUserAttributes).
			props := maps.Clone(m.UserProperties)
			if props == nil {
				props = map[string]string{}
			}
			props["__transactionId__"] = id
			props["TRANSACTION_CHECK_TIMES"] = strconv.Itoa(h.checks)
			m.UserProperties = props
			checks = append(checks, txCheck{client: h.client, topic: t.name, cmd: &rocketmqv2.TelemetryCommand{
				Status: v2OK(),
				Command: &rocketmqv2.TelemetryCommand_RecoverOrphanedTransactionCommand{
					RecoverOrphanedTransactionCommand: &rocketmqv2.RecoverOrphanedTransactionCommand{Message: m, TransactionId: id},
				},
			}})
		}
		t.mu.Unlock()
	}
	for _, c := range checks {
		peer := b.telemetry.pick(c.client, c.topic)
		if peer == nil {
			continue // counted all the same
		}
		select {
		case peer.out <- c.cmd:
		default: // the stream is stuck: the next check will do
		}
	}
}
