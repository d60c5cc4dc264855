package broker

import (
	"context"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// messagingServer serves rocketryv1.MessagingService.
type messagingServer struct {
	rocketryv1.UnimplementedMessagingServiceServer
	b *Broker
}

func (s messagingServer) SendMessage(ctx context.Context, req *rocketryv1.SendMessageRequest) (*rocketryv1.SendMessageResponse, error) {
	return s.b.sendMessage(ctx, req)
}

// sendMessage validates, applies faults and throttling, then stores. A
// request is refused whole or each of its messages is stored or answered
// as a duplicate.
func (b *Broker) sendMessage(ctx context.Context, req *rocketryv1.SendMessageRequest) (*rocketryv1.SendMessageResponse, error) {
	b.sendRequests.Add(1)
	name, err := b.validate(req)
	if err != nil {
		b.badRequests.Add(1)
		return nil, err
	}
	t, err := b.topicFor(name)
	if err != nil {
		b.badRequests.Add(1)
		return nil, err
	}
	if err := b.injectFaults(ctx); err != nil {
		return nil, err
	}
	th := b.throttle.Load()
	now := b.now()
	if err := b.checkStorageLoad(th, now); err != nil {
		return nil, err
	}
	return b.store(t, req.Messages, th, now)
}

// topicFor returns the topic named name, created if the broker creates
// topics, or a 404 status.
func (b *Broker) topicFor(name string) (*topic, error) {
	b.topicsMu.RLock()
	t := b.topics[name]
	b.topicsMu.RUnlock()
	if t != nil {
		return t, nil
	}
	if !b.cfg.autoCreate {
		return nil, statusError(rocketryv1.Code_CODE_TOPIC_NOT_FOUND, 0, 0,
			fmt.Sprintf("broker: topic %q not found (the broker does not create topics)", name))
	}
	b.topicsMu.Lock()
	defer b.topicsMu.Unlock()
	if t = b.topics[name]; t == nil {
		t = newTopic(name, b.cfg.queues, b.cfg.dedupCount)
		b.topics[name] = t
		b.log.Debug("broker: topic created", "topic", name)
	}
	return t, nil
}

// lookupTopic returns the topic named name or nil, without creating it.
func (b *Broker) lookupTopic(name string) *topic {
	b.topicsMu.RLock()
	defer b.topicsMu.RUnlock()
	return b.topics[name]
}

// injectFaults applies the configured faults to one call; a non-nil error
// is the call's answer.
func (b *Broker) injectFaults(ctx context.Context) error {
	f := b.faults.Load()
	if f.Latency > 0 {
		b.faultCount[faultLatency].Add(1)
		t := time.NewTimer(f.Latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctxError(ctx)
		case <-b.stopCh:
			t.Stop()
			return unavailable("broker: stopping")
		}
	}
	if f.Unavailable {
		b.faultCount[faultUnavailable].Add(1)
		return unavailable("broker: unavailable (injected fault)")
	}
	switch k := f.pick(b.rng); k {
	case faultBlackhole:
		b.faultCount[k].Add(1)
		select {
		case <-ctx.Done():
			return ctxError(ctx)
		case <-b.stopCh:
			return unavailable("broker: stopping")
		}
	case faultDrop:
		b.faultCount[k].Add(1)
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			b.srvMu.Lock()
			tl := b.lis
			b.srvMu.Unlock()
			if tl != nil {
				tl.closeConn(p.Addr.String())
			}
		}
		return unavailable("broker: connection dropped (injected fault)")
	case faultInternal:
		b.faultCount[k].Add(1)
		return statusError(rocketryv1.Code_CODE_INTERNAL_ERROR, 0, 0, "broker: internal error (injected fault); nothing stored")
	}
	return nil
}

func unavailable(msg string) error {
	return statusError(rocketryv1.Code_CODE_UNAVAILABLE, 0, 0, msg)
}

// ctxError is the status of a call whose context ended.
func ctxError(ctx context.Context) error {
	st := status.FromContextError(ctx.Err())
	return statusErrorCode(st.Code(), rocketryv1.Code_CODE_UNAVAILABLE, 0, 0, "broker: "+st.Message())
}

// checkStorageLoad refuses with 530 STORAGE_LOAD while the cold-read rate
// is above its maximum.
func (b *Broker) checkStorageLoad(th *throttleState, now time.Time) error {
	if th.MaxStorageLoad <= 0 {
		if b.coldThrottled.Load() && b.coldThrottled.CompareAndSwap(true, false) {
			b.log.Info("broker: throttling lifted", "reason", "STORAGE_LOAD")
		}
		return nil
	}
	r, wait := b.cold.rate(now, th.StorageLoadWindow, th.MaxStorageLoad)
	if r > th.MaxStorageLoad {
		if b.coldThrottled.CompareAndSwap(false, true) {
			b.log.Warn("broker: throttling sends", "reason", "STORAGE_LOAD", "storage_load", r, "max", th.MaxStorageLoad)
		}
		b.throttledBy[rocketryv1.ThrottleReason_THROTTLE_REASON_STORAGE_LOAD].Add(1)
		return statusError(rocketryv1.Code_CODE_TOO_MANY_REQUESTS, rocketryv1.ThrottleReason_THROTTLE_REASON_STORAGE_LOAD, wait,
			fmt.Sprintf("broker: storage load %.1f cold reads/s is over %.1f; nothing stored", r, th.MaxStorageLoad))
	}
	if b.coldThrottled.Load() && b.coldThrottled.CompareAndSwap(true, false) {
		b.log.Info("broker: throttling lifted", "reason", "STORAGE_LOAD", "storage_load", r, "max", th.MaxStorageLoad)
	}
	return nil
}

// store stores msgs in t, all of them or none when throttled.
func (b *Broker) store(t *topic, msgs []*rocketryv1.Message, th *throttleState, now time.Time) (*rocketryv1.SendMessageResponse, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if th.MaxBacklog > 0 || t.throttled {
		bl := t.backlogLocked()
		b.backlogTransitionLocked(t, bl, th, now)
		if t.throttled {
			b.throttledBy[rocketryv1.ThrottleReason_THROTTLE_REASON_BACKLOG].Add(1)
			return nil, statusError(rocketryv1.Code_CODE_TOO_MANY_REQUESTS, rocketryv1.ThrottleReason_THROTTLE_REASON_BACKLOG,
				b.backlogWait(t, bl, th, now),
				fmt.Sprintf("broker: backlog of topic %q is %d, over %d (accepting again at %d or under); nothing stored",
					t.name, bl, th.MaxBacklog, th.BacklogLowWater))
		}
	}
	if ok, wait := th.allowSend(now, len(msgs)); !ok {
		b.throttledBy[rocketryv1.ThrottleReason_THROTTLE_REASON_SEND_RATE].Add(1)
		return nil, statusError(rocketryv1.Code_CODE_TOO_MANY_REQUESTS, rocketryv1.ThrottleReason_THROTTLE_REASON_SEND_RATE, wait,
			fmt.Sprintf("broker: send rate over %.1f messages/s; nothing stored", th.MaxSendRate))
	}
	results := make([]rocketryv1.SendResult, len(msgs))
	resp := &rocketryv1.SendMessageResponse{Results: make([]*rocketryv1.SendResult, len(msgs))}
	nowNano, ttl := now.UnixNano(), b.cfg.dedupTTL
	var added, dups int64
	for i, m := range msgs {
		r := &results[i]
		resp.Results[i] = r
		r.MessageId = m.MessageId
		if e, ok := t.dedup.lookup(m.MessageId, nowNano, ttl); ok {
			r.QueueId, r.Offset, r.Duplicate = e.queue, e.offset, true
			dups++
			continue
		}
		q := t.next
		t.next++
		if t.next == len(t.queues) {
			t.next = 0
		}
		off := int64(len(t.queues[q]))
		m.Topic = t.name // share one string per topic
		t.queues[q] = append(t.queues[q], m)
		t.dedup.remember(m.MessageId, int32(q), off, nowNano, ttl)
		r.QueueId, r.Offset = int32(q), off
		added++
	}
	t.stored += added
	for _, g := range t.groups {
		g.backlog += added
	}
	if th.MaxBacklog > 0 {
		b.backlogTransitionLocked(t, t.backlogLocked(), th, now)
	}
	b.stored.Add(added)
	if dups > 0 {
		b.duplicates.Add(dups)
	}
	return resp, nil
}

// backlogTransitionLocked moves t in or out of backlog throttling, with
// hysteresis: in above MaxBacklog, out at BacklogLowWater or under. It
// notes when a spell begins, and on its end the drain rate measured over
// it, for backlogWait.
func (b *Broker) backlogTransitionLocked(t *topic, bl int64, th *throttleState, now time.Time) {
	switch {
	case th.MaxBacklog <= 0:
		if t.throttled {
			b.endSpellLocked(t, now)
			b.log.Info("broker: throttling lifted", "reason", "BACKLOG", "topic", t.name, "backlog", bl)
		}
	case !t.throttled && bl > th.MaxBacklog:
		t.throttled = true
		t.throttledAt, t.consumedAtThrottle, t.commitsAtThrottle = now, t.consumedTotal, t.commits
		b.log.Warn("broker: throttling sends", "reason", "BACKLOG", "topic", t.name, "backlog", bl,
			"max", th.MaxBacklog, "low_water", th.BacklogLowWater)
	case t.throttled && bl <= th.BacklogLowWater:
		b.endSpellLocked(t, now)
		b.log.Info("broker: throttling lifted", "reason", "BACKLOG", "topic", t.name, "backlog", bl,
			"low_water", th.BacklogLowWater)
	}
}

// endSpellLocked ends t's backlog throttling spell, keeping its drain rate
// when the spell was long enough to measure it.
func (b *Broker) endSpellLocked(t *topic, now time.Time) {
	if dr, ok := t.spellDrainLocked(now); ok && dr.rate > 0 {
		t.spellDrain = dr
	}
	t.throttled = false
}

// backlogWait estimates when t's backlog falls to the low-water mark and
// the commit that gets it there has come: the excess over the mark divided
// by the drain rate, plus the drain's step (topic.drainLocked), at least
// 1 ms and at most the window; the window when nothing drains. Without the
// step, a hint shorter than the time between the consumer's commits sends
// a producer back before the backlog has moved, to be refused again. Every
// sender refused at the same moment gets the same hint; a producer spreads
// its retries with its own schedule's jitter.
func (b *Broker) backlogWait(t *topic, bl int64, th *throttleState, now time.Time) time.Duration {
	dr := t.drainLocked(now, th.StorageLoadWindow)
	if dr.rate <= 0 {
		return th.StorageLoadWindow
	}
	d := time.Duration(float64(bl-th.BacklogLowWater)/dr.rate*float64(time.Second)) + dr.step
	return min(max(d, time.Millisecond), th.StorageLoadWindow)
}

// validate checks a request and returns its topic, or a 4xx status naming
// the problem and the message index.
func (b *Broker) validate(req *rocketryv1.SendMessageRequest) (string, error) {
	if req == nil || len(req.Messages) == 0 {
		return "", badRequest("request has no messages")
	}
	if n := len(req.Messages); n > b.cfg.maxBatch {
		return "", badRequest(fmt.Sprintf("request has %d messages; the most is %d", n, b.cfg.maxBatch))
	}
	var name string
	for i, m := range req.Messages {
		if m == nil {
			return "", badRequest(fmt.Sprintf("message %d: missing", i))
		}
		if i == 0 {
			if msg := checkTopic(m.Topic); msg != "" {
				return "", badRequest(fmt.Sprintf("message 0: %s", msg))
			}
			name = m.Topic
		} else if m.Topic != name {
			if m.Topic == "" {
				return "", badRequest(fmt.Sprintf("message %d: empty topic", i))
			}
			return "", badRequest(fmt.Sprintf("message %d: topic %s differs from message 0's topic %q; a request carries one topic",
				i, quote(m.Topic), name))
		}
		if msg := checkID(m.MessageId); msg != "" {
			return "", badRequest(fmt.Sprintf("message %d: %s", i, msg))
		}
		if len(m.Body) > b.cfg.maxBody {
			return "", statusError(rocketryv1.Code_CODE_MESSAGE_TOO_LARGE, 0, 0,
				fmt.Sprintf("broker: message %d (id %q): body of %d bytes is over the limit of %d bytes",
					i, m.MessageId, len(m.Body), b.cfg.maxBody))
		}
		if !utf8.ValidString(m.Tag) {
			return "", badRequest(fmt.Sprintf("message %d: tag is not valid UTF-8", i))
		}
		for j, k := range m.Keys {
			if !utf8.ValidString(k) {
				return "", badRequest(fmt.Sprintf("message %d: key %d is not valid UTF-8", i, j))
			}
		}
		for k, v := range m.Properties {
			if k == "" {
				return "", badRequest(fmt.Sprintf("message %d: a property has an empty name", i))
			}
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return "", badRequest(fmt.Sprintf("message %d: property %s is not valid UTF-8", i, quote(k)))
			}
		}
	}
	return name, nil
}

// checkTopic returns what is wrong with a topic name, or "".
func checkTopic(name string) string {
	return checkName("topic", name, maxTopicLen)
}

// checkName returns what is wrong with a name (a topic, a group, an id):
// empty, too long, not UTF-8, or with spaces or control characters.
func checkName(what, s string, maxLen int) string {
	switch {
	case s == "":
		return "empty " + what
	case len(s) > maxLen:
		return fmt.Sprintf("%s is %d bytes long; the most is %d", what, len(s), maxLen)
	case !utf8.ValidString(s):
		return what + " " + quote(s) + " is not valid UTF-8"
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Sprintf("%s %q has a space or control character", what, s)
		}
	}
	return ""
}

// checkID returns what is wrong with a message id, or "": any valid UTF-8
// of 1 to 255 bytes is an id.
func checkID(id string) string {
	switch {
	case id == "":
		return "missing message_id"
	case len(id) > maxIDLen:
		return fmt.Sprintf("message_id is %d bytes long; the most is %d", len(id), maxIDLen)
	case !utf8.ValidString(id):
		return "message_id " + quote(id) + " is not valid UTF-8"
	}
	return ""
}

// quote quotes s for an error message, shortened when long.
func quote(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q...", s[:64])
	}
	return fmt.Sprintf("%q", s)
}
