package broker

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
)

// The apache.rocketmq.v2 consumer calls of a SimpleConsumer: ReceiveMessage,
// AckMessage and ChangeInvisibleDuration, answering as the RocketMQ 5 proxy
// does (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/consumer/:
// ReceiveMessageActivity.java, ReceiveMessageResponseStreamWriter.java,
// AckMessageActivity.java, ChangeInvisibleDurationActivity.java) over a
// broker that pops messages (popState). A v2 consumer group is a consumer
// group of the store, the same as rocketry.v1's of that name: its
// acknowledgements move its committed offsets, so its backlog counts for
// BACKLOG throttling, and the messages it receives far behind a queue's
// head are cold reads for STORAGE_LOAD.

// nackInvisible is how soon a message the broker could not write to the
// receiver's stream is delivered again, as the proxy's
// ReceiveMessageResponseStreamWriter.NACK_INVISIBLE_TIME.
const nackInvisible = time.Second

// maxReceiveBatch caps a ReceiveMessage's batch_size.
const maxReceiveBatch = 32

// A receive with auto_renew (a PushConsumer's) leaves its messages
// invisible as long as the proxy's renewal would: the proxy ignores the
// request's invisible_duration, pops each message invisible for its
// defaultInvisibleTimeMills (60 s), and then renews the handle itself
// (DefaultReceiptHandleManager: it changes the invisible time some 10 s
// before it ends, renewAheadTimeMillis, every renewSchedulePeriodMillis) until the client
// acknowledges the message or changes its invisible time, or until
// renewMaxTimeMillis (3 h) after the receive, when it stops renewing and
// the message is delivered again after the group's retry delay
// (proxy/src/main/java/org/apache/rocketmq/proxy/config/ProxyConfig.java,
// proxy/src/main/java/org/apache/rocketmq/proxy/service/receipt/DefaultReceiptHandleManager.java).
// The handle the client holds stays good through every renewal: the proxy
// maps it to the renewed one on AckMessage and ChangeInvisibleDuration. The
// broker models that renewal without a timer: such a delivery is
// invisible for autoRenewInvisible (the renewal's bound) from its
// receive, and its handle is good for that long; an AckMessage ends it,
// and a ChangeInvisibleDuration replaces it, as the proxy's do. Not
// modelled: the proxy ends the renewal of a client it sees go offline
// (its handles become visible 1 s later), and adds the retry delay at the
// bound.
const autoRenewInvisible = 3 * time.Hour

// pollReserve is how long before the request's deadline a long poll ends,
// so that its answer arrives in time.
const pollReserve = 100 * time.Millisecond

// ReceiveMessage delivers up to batch_size messages of the request's topic
// to its group, from every queue of the topic on this broker (as the
// proxy's pop, which names the broker and not the queue: a client's choice
// of queue does not matter), each invisible to the group for the request's
// invisible_duration. When none is receivable it waits for one up to the
// long polling time (WithLongPolling). The stream is a status, 20000 OK
// then the messages, or 40401 MESSAGE_NOT_FOUND when none came, and last a
// delivery_timestamp, the broker's time, as ReceiveMessageResponseStreamWriter
// writes it. Refusals are statuses too: 40002 ILLEGAL_TOPIC, 40003
// ILLEGAL_CONSUMER_GROUP, 40402 TOPIC_NOT_FOUND, 40010
// ILLEGAL_FILTER_EXPRESSION (SQL filters are not supported), 40011
// ILLEGAL_INVISIBLE_TIME (not for a receive with auto_renew, whose
// invisible_duration is ignored: autoRenewInvisible), 40018 ILLEGAL_POLLING_TIME (40000 BAD_REQUEST
// for a client before 5.0.3: pollingTimeCode), 40000 BAD_REQUEST for a
// batch_size under 1 (over 32 is cut to 32). A new group starts at offset 0
// of every queue, as a RocketMQ broker starts one on a queue whose messages
// are all in memory. A message not acknowledged in its invisible time is
// delivered again with delivery_attempt one higher, without limit: there
// is no dead-letter queue.
func (s rocketmqServer) ReceiveMessage(req *rocketmqv2.ReceiveMessageRequest, stream grpc.ServerStreamingServer[rocketmqv2.ReceiveMessageResponse]) error {
	b := s.b
	ctx := stream.Context()
	w := receiveWriter{stream: stream, b: b}
	if refused := b.authRefusal(ctx, "ReceiveMessage"); refused != nil {
		return w.status(refused) // rocketmq_acl.go
	}
	poll, st := b.pollingTime(ctx, req)
	if st != nil {
		return w.status(st)
	}
	topicName, groupName := req.GetMessageQueue().GetTopic().GetName(), req.GetGroup().GetName()
	t, st := b.v2ConsumerTopic(topicName, groupName)
	if st != nil {
		return w.status(st)
	}
	invisible := req.GetInvisibleDuration().AsDuration()
	if req.GetAutoRenew() {
		invisible = autoRenewInvisible
	} else if invisible < b.cfg.minInvisible || invisible > MaxInvisibleTime {
		return w.status(v2Status(rocketmqv2.Code_ILLEGAL_INVISIBLE_TIME,
			fmt.Sprintf("broker: invisible_duration %v is outside %v..%v", invisible, b.cfg.minInvisible, MaxInvisibleTime)))
	}
	fe := req.GetFilterExpression()
	if fe.GetType() == rocketmqv2.FilterType_SQL {
		return w.status(v2Status(rocketmqv2.Code_ILLEGAL_FILTER_EXPRESSION, "broker: SQL filter expressions are not supported; use a TAG expression"))
	}
	filter := parseTagFilter(fe.GetExpression())
	n := int(req.GetBatchSize())
	if n < 1 {
		return w.status(v2Status(rocketmqv2.Code_BAD_REQUEST, fmt.Sprintf("broker: batch_size %d is under 1", n)))
	}
	n = min(n, maxReceiveBatch)

	pollEnd := time.NewTimer(poll)
	defer pollEnd.Stop()
	for {
		got, wake, nextAt, now := b.pop(t, groupName, filter, n, invisible)
		if len(got) > 0 {
			return w.messages(t, groupName, got)
		}
		var soon <-chan time.Time
		var tm *time.Timer
		if !nextAt.IsZero() {
			tm = time.NewTimer(max(nextAt.Sub(now), time.Millisecond))
			soon = tm.C
		}
		var err error
		ended := true
		select {
		case <-wake:
			ended = false
		case <-soon:
			ended = false
		case <-pollEnd.C:
			err = w.status(v2Status(rocketmqv2.Code_MESSAGE_NOT_FOUND, "no new message"))
		case <-ctx.Done():
			err = status.FromContextError(ctx.Err()).Err()
		case <-b.stopCh:
			err = status.Error(codes.Unavailable, "broker: stopping")
		}
		if tm != nil {
			tm.Stop()
		}
		if ended {
			return err
		}
	}
}

// pollingTime is how long a receive may wait, as ReceiveMessageActivity
// computes it: the request's long_polling_timeout, else the time left
// before the request's deadline less half the client's request_timeout;
// then within WithLongPolling's bounds, and within the deadline, or a
// refusal when the deadline leaves less than the least polling time:
// 40018 ILLEGAL_POLLING_TIME for a client whose version (the
// x-mq-client-version header) is "5.0.3" or later, else 40000 BAD_REQUEST
// (pollingTimeCode). The broker does not keep each client's Settings, so
// the request_timeout is DefaultClientRequestTimeout, the official
// clients' default (the Go client 5.1.2, which sends no
// long_polling_timeout, has no option to change it).
func (b *Broker) pollingTime(ctx context.Context, req *rocketmqv2.ReceiveMessageRequest) (time.Duration, *rocketmqv2.Status) {
	remaining := time.Duration(1<<63 - 1)
	if dl, ok := ctx.Deadline(); ok {
		remaining = time.Until(dl)
	}
	poll := remaining - DefaultClientRequestTimeout/2
	if req.LongPollingTimeout != nil {
		poll = req.GetLongPollingTimeout().AsDuration()
	}
	poll = min(max(poll, b.cfg.minPolling), b.cfg.maxPolling)
	if poll > remaining {
		if remaining < b.cfg.minPolling {
			return 0, v2Status(pollingTimeCode(ctx),
				"broker: the deadline time remaining is not enough for polling, please check network condition")
		}
		poll = remaining
	}
	return max(min(poll, remaining-pollReserve), 0), nil
}

// pollingTimeCode is the code of a receive refused for a deadline too
// short to poll, as ReceiveMessageActivity picks it
// (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/consumer/ReceiveMessageActivity.java,
// ILLEGAL_POLLING_TIME_INTRODUCED_CLIENT_VERSION): 40000 BAD_REQUEST when
// the call has no x-mq-client-version header or "5.0.3" sorts after it
// (Java's String.compareTo, by characters, not by version numbers), else
// 40018 ILLEGAL_POLLING_TIME. So the official Go client 5.1.2, which sends
// "5.0.1-rc1" (golang/metadata/metadata.go), and the Node.js client, which
// sends its package's version ("1.0.8"), are answered 40000; the Java
// client 5.0.3 and later 40018.
func pollingTimeCode(ctx context.Context) rocketmqv2.Code {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get("x-mq-client-version")
	if len(v) == 0 || "5.0.3" > v[0] {
		return rocketmqv2.Code_BAD_REQUEST
	}
	return rocketmqv2.Code_ILLEGAL_POLLING_TIME
}

// v2ConsumerTopic validates a consumer call's topic and group and returns
// the topic, created when the broker creates topics, or a status.
func (b *Broker) v2ConsumerTopic(topicName, groupName string) (*topic, *rocketmqv2.Status) {
	if msg := checkTopic(topicName); msg != "" {
		b.badRequests.Add(1)
		return nil, v2Status(rocketmqv2.Code_ILLEGAL_TOPIC, "broker: "+msg)
	}
	if msg := checkName("group", groupName, maxTopicLen); msg != "" {
		b.badRequests.Add(1)
		return nil, v2Status(rocketmqv2.Code_ILLEGAL_CONSUMER_GROUP, "broker: "+msg)
	}
	t, r := b.topicFor(topicName)
	if r != nil {
		b.badRequests.Add(1)
		return nil, v2Status(rocketmqv2.Code_TOPIC_NOT_FOUND, r.msg)
	}
	return t, nil
}

// pop is one look for messages: it delivers what it finds (popLocked) and
// records the consumption for throttling. With nothing found it returns
// the topic's wake channel and when a message may become receivable.
func (b *Broker) pop(t *topic, groupName string, filter tagFilter, n int, invisible time.Duration) (got []popped, wake <-chan struct{}, nextAt, now time.Time) {
	l := b.throttle.limits()
	now = b.now()
	t.mu.Lock()
	t.promoteLocked(now)
	g := t.groupLocked(groupName)
	if g.pop == nil {
		g.pop = newPopState(g.committed)
	}
	got, cold, forward := t.popLocked(g, filter, n, invisible, now, l)
	if forward > 0 {
		b.throttle.consumedLocked(t, l, now, forward)
		b.throttle.backlogChangedLocked(t, l, now)
	}
	if len(got) == 0 {
		wake, nextAt = t.wakeLocked(), t.nextVisibleLocked(g, now)
	}
	t.mu.Unlock()
	b.throttle.coldReads(l, now, cold)
	return got, wake, nextAt, now
}

// receiveWriter writes a ReceiveMessage stream as the proxy's
// ReceiveMessageResponseStreamWriter does: a status, the messages after an
// OK, and a delivery timestamp last.
type receiveWriter struct {
	stream grpc.ServerStreamingServer[rocketmqv2.ReceiveMessageResponse]
	b      *Broker
}

func (w receiveWriter) status(st *rocketmqv2.Status) error {
	if err := w.stream.Send(&rocketmqv2.ReceiveMessageResponse{Content: &rocketmqv2.ReceiveMessageResponse_Status{Status: st}}); err != nil {
		return err
	}
	return w.done()
}

func (w receiveWriter) done() error {
	return w.stream.Send(&rocketmqv2.ReceiveMessageResponse{
		Content: &rocketmqv2.ReceiveMessageResponse_DeliveryTimestamp{DeliveryTimestamp: timestamp(w.b.now())}})
}

// messages writes an OK status and got. Messages it could not write are
// delivered again nackInvisible later, as the proxy does.
func (w receiveWriter) messages(t *topic, groupName string, got []popped) error {
	err := w.stream.Send(&rocketmqv2.ReceiveMessageResponse{Content: &rocketmqv2.ReceiveMessageResponse_Status{Status: v2OK()}})
	for i, p := range got {
		if err == nil {
			err = w.stream.Send(&rocketmqv2.ReceiveMessageResponse{Content: &rocketmqv2.ReceiveMessageResponse_Message{Message: v2Message(t.name, p)}})
		}
		if err != nil {
			w.b.nack(t, groupName, got[i:])
			return err
		}
	}
	return w.done()
}

// nack makes messages received but not written to the receiver visible
// again nackInvisible from now, without counting the attempt.
func (b *Broker) nack(t *topic, groupName string, got []popped) {
	now := b.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.groups[groupName]
	for _, p := range got {
		h, err := decodeHandle(p.handle)
		if err != nil {
			continue
		}
		if d, _, problem := t.handleProblem(g, h, now); problem == "" && d != nil {
			d.visibleAt = now.Add(nackInvisible)
			d.attempts--
			g.pop.token++
			d.token = g.pop.token
		}
	}
}

// v2Message is a delivered message as the proxy's GrpcConverter.buildMessage
// makes it (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/common/GrpcConverter.java):
// the body as stored with its MD5 digest in upper-case hex (the official
// Node.js client reads the digest of every message it receives), the
// message type, group and delivery time, and the receipt handle, queue,
// offset and delivery attempt of this delivery.
func v2Message(topicName string, p popped) *rocketmqv2.Message {
	m, x := p.msg, p.extra
	sum := md5.Sum(m.GetBody())
	sp := &rocketmqv2.SystemProperties{
		Keys:            m.GetKeys(),
		MessageId:       m.GetMessageId(),
		BodyDigest:      &rocketmqv2.Digest{Type: rocketmqv2.DigestType_MD5, Checksum: strings.ToUpper(hex.EncodeToString(sum[:]))},
		BodyEncoding:    rocketmqv2.Encoding_IDENTITY,
		MessageType:     typeOf(m, x),
		ReceiptHandle:   &p.handle,
		QueueId:         int32(p.queue),
		QueueOffset:     &p.offset,
		DeliveryAttempt: &p.attempt,
	}
	if tag := m.GetTag(); tag != "" {
		sp.Tag = &tag
	}
	if x != nil {
		if x.gzip {
			sp.BodyEncoding = rocketmqv2.Encoding_GZIP
		}
		if x.group != "" {
			sp.MessageGroup = &x.group
		}
		sp.DeliveryTimestamp = timestamp(x.deliverAt)
	}
	return &rocketmqv2.Message{
		Topic:            &rocketmqv2.Resource{Name: topicName},
		UserProperties:   m.GetProperties(),
		SystemProperties: sp,
		Body:             m.GetBody(),
	}
}

// AckMessage acknowledges received messages by their receipt handles: an
// acknowledged message is not delivered to the group again, and the
// group's committed offsets move past what is acknowledged. Each entry
// has its status: 20000 OK (also for a message acknowledged already), or
// 40013 INVALID_RECEIPT_HANDLE for a handle that is expired (its invisible
// time is over: the message will be, or was, delivered again), stale or
// not this broker's. The top status is the entries' code when they share
// one, else 30000 MULTIPLE_RESULTS, as AckMessageActivity answers.
func (s rocketmqServer) AckMessage(ctx context.Context, req *rocketmqv2.AckMessageRequest) (*rocketmqv2.AckMessageResponse, error) {
	b := s.b
	t, st := b.v2ConsumerTopic(req.GetTopic().GetName(), req.GetGroup().GetName())
	if st != nil {
		return &rocketmqv2.AckMessageResponse{Status: st}, nil
	}
	if len(req.GetEntries()) == 0 {
		return &rocketmqv2.AckMessageResponse{Status: v2Status(rocketmqv2.Code_BAD_REQUEST, "broker: no entries to acknowledge")}, nil
	}
	l := b.throttle.limits()
	now := b.now()
	resp := &rocketmqv2.AckMessageResponse{}
	var forward int64
	t.mu.Lock()
	g := t.groups[req.GetGroup().GetName()]
	for _, e := range req.GetEntries() {
		st := v2OK()
		h, err := decodeHandle(e.GetReceiptHandle())
		done, problem := false, ""
		if err != nil {
			problem = err.Error()
		} else {
			_, done, problem = t.handleProblem(g, h, now)
		}
		switch {
		case problem != "":
			st = v2Status(rocketmqv2.Code_INVALID_RECEIPT_HANDLE, "broker: "+problem)
		case !done:
			delete(g.pop.pending[h.queue], h.offset)
			forward += t.advanceLocked(g, h.queue)
		}
		resp.Entries = append(resp.Entries, &rocketmqv2.AckMessageResultEntry{
			MessageId: e.GetMessageId(), ReceiptHandle: e.GetReceiptHandle(), Status: st})
	}
	if forward > 0 {
		b.throttle.consumedLocked(t, l, now, forward)
		b.throttle.backlogChangedLocked(t, l, now)
	}
	t.notifyLocked() // a group's next message may be receivable now
	t.mu.Unlock()
	resp.Status = ackStatus(resp.Entries)
	return resp, nil
}

// ackStatus is the top status of an AckMessage answer.
func ackStatus(entries []*rocketmqv2.AckMessageResultEntry) *rocketmqv2.Status {
	first := entries[0].GetStatus()
	for _, e := range entries[1:] {
		if e.GetStatus().GetCode() != first.GetCode() {
			return v2Status(rocketmqv2.Code_MULTIPLE_RESULTS, "MULTIPLE_RESULTS")
		}
	}
	return v2Status(first.GetCode(), first.GetCode().String())
}

// ChangeInvisibleDuration makes a received message invisible for the
// request's invisible_duration from now (0 makes it receivable at once)
// and answers its new receipt handle; the old one is stale from then on.
// Unless suspend is set, its next delivery counts as a new attempt, as
// after an invisible time that ran out. Statuses: 40011
// ILLEGAL_INVISIBLE_TIME over 12 h, 40013 INVALID_RECEIPT_HANDLE as for
// AckMessage (an acknowledged message included).
func (s rocketmqServer) ChangeInvisibleDuration(ctx context.Context, req *rocketmqv2.ChangeInvisibleDurationRequest) (*rocketmqv2.ChangeInvisibleDurationResponse, error) {
	b := s.b
	t, st := b.v2ConsumerTopic(req.GetTopic().GetName(), req.GetGroup().GetName())
	if st != nil {
		return &rocketmqv2.ChangeInvisibleDurationResponse{Status: st}, nil
	}
	invisible := req.GetInvisibleDuration().AsDuration()
	if invisible < 0 || invisible > MaxInvisibleTime {
		return &rocketmqv2.ChangeInvisibleDurationResponse{Status: v2Status(rocketmqv2.Code_ILLEGAL_INVISIBLE_TIME,
			fmt.Sprintf("broker: invisible_duration %v is outside 0..%v", invisible, MaxInvisibleTime))}, nil
	}
	h, err := decodeHandle(req.GetReceiptHandle())
	if err != nil {
		return &rocketmqv2.ChangeInvisibleDurationResponse{Status: v2Status(rocketmqv2.Code_INVALID_RECEIPT_HANDLE, "broker: "+err.Error())}, nil
	}
	now := b.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.groups[req.GetGroup().GetName()]
	d, done, problem := t.handleProblem(g, h, now)
	if done {
		problem = "the message is acknowledged already"
	}
	if problem != "" {
		return &rocketmqv2.ChangeInvisibleDurationResponse{Status: v2Status(rocketmqv2.Code_INVALID_RECEIPT_HANDLE, "broker: "+problem)}, nil
	}
	d.visibleAt = now.Add(invisible)
	if req.GetSuspend() {
		d.attempts--
	}
	g.pop.token++
	d.token = g.pop.token
	t.notifyLocked()
	return &rocketmqv2.ChangeInvisibleDurationResponse{Status: v2OK(), ReceiptHandle: encodeHandle(h.queue, h.offset, d.token, d.visibleAt)}, nil
}
