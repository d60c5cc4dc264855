package broker

import (
	"context"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// The protocols the broker serves sends on, as SendRecord.Protocol names
// them.
const (
	ProtocolRocketryV1 = "rocketry.v1"
	ProtocolRocketMQV2 = "apache.rocketmq.v2"
)

// messagingServer serves rocketryv1.MessagingService.
type messagingServer struct {
	rocketryv1.UnimplementedMessagingServiceServer
	b *Broker
}

// SendMessage is the rocketry.v1 face of the send core: a request is
// refused whole, with a gRPC status and an ErrorDetail, or each of its
// messages is stored or answered as a duplicate. A message with a
// message_group goes to its group's queue, one with a delivery_time waits
// for it, as on the RocketMQ 5 face (v1Extras).
func (s messagingServer) SendMessage(ctx context.Context, req *rocketryv1.SendMessageRequest) (*rocketryv1.SendMessageResponse, error) {
	sr := sendRequest{protocol: ProtocolRocketryV1, msgs: req.GetMessages(), whole: true}
	s.b.v1Extras(&sr, s.b.now())
	refused, res := s.b.send(ctx, sr)
	if refused != nil {
		return nil, refused.status()
	}
	for i := range res {
		if res[i].refused != nil {
			return nil, res[i].refused.status()
		}
	}
	results := make([]rocketryv1.SendResult, len(res))
	resp := &rocketryv1.SendMessageResponse{Results: make([]*rocketryv1.SendResult, len(res))}
	for i, m := range req.Messages {
		r := &results[i]
		r.MessageId, r.QueueId, r.Offset, r.Duplicate = m.MessageId, res[i].queue, res[i].offset, res[i].duplicate
		resp.Results[i] = r
	}
	return resp, nil
}

// sendRequest is one send request as the send core sees it, from either
// face.
type sendRequest struct {
	protocol string
	msgs     []*rocketryv1.Message
	// invalid holds, per message, a refusal the face found converting it
	// to a rocketryv1.Message; nil, or as long as msgs.
	invalid []*refusal
	// queues holds, per message, the queue it goes to (apache.rocketmq.v2:
	// the queue a single message's group hashes to), or -1 for the next
	// queue in turn; nil means every message goes to the next queue in turn.
	queues []int32
	// extras holds, per message, what the broker keeps of an
	// apache.rocketmq.v2 message beside its rocketry.v1 form (topics.go);
	// nil, or as long as msgs.
	extras []*msgExtra
	// whole makes one invalid message refuse every message of the request
	// (rocketry.v1, and apache.rocketmq.v2 as the proxy does); without it an
	// invalid message is refused alone and the others go on.
	whole bool
	// oneQueue stores every message of the request on one queue, the next
	// in turn, when queues does not name one (apache.rocketmq.v2).
	oneQueue bool
	// noDedup stores a message whose id the dedup window remembers again,
	// as a copy (apache.rocketmq.v2 without WithRocketMQDedup).
	noDedup bool
	// queued makes the request wait in the broker's send queue, when
	// WithSendQueue sets one, before it is stored (apache.rocketmq.v2).
	queued bool
	// tx, on an apache.rocketmq.v2 request of TRANSACTION messages, holds
	// them as half messages of one transaction instead of storing them
	// (rocketmq_tx.go).
	tx *txStart
}

// entryResult is the send core's answer for one message: refused, or
// where it is stored.
type entryResult struct {
	refused *refusal
	placement
}

// send is the one path of a send request on both faces: validate, inject
// faults, throttle, store, in that order (a StoredInternalRate fault
// answers after the store). It answers a refusal of the
// request as a whole (no messages, too many) or one entryResult per
// message. Every message that passes validation shares the answer of the
// later steps: all refused alike (not found, a fault, throttled) or each
// stored or answered as a duplicate. The send observer, if any, sees each
// message's answer.
func (b *Broker) send(ctx context.Context, req sendRequest) (*refusal, []entryResult) {
	var at time.Time
	if b.cfg.observer != nil {
		at = b.now()
	}
	whole, res := b.decide(ctx, req)
	if b.cfg.observer != nil {
		b.observe(req, at, whole, res)
	}
	return whole, res
}

// decide is send's decision, without the observer. It counts the request,
// and counts it once as a bad request when any message is invalid or its
// topic is not found.
func (b *Broker) decide(ctx context.Context, req sendRequest) (*refusal, []entryResult) {
	b.sendRequests.Add(1)
	if req.protocol == ProtocolRocketMQV2 {
		b.sendRequestsV2.Add(1)
	}
	if n := len(req.msgs); n == 0 || n > b.cfg.maxBatch {
		b.badRequests.Add(1)
		if n == 0 {
			return badMessage(problemOther, "request has no messages"), nil
		}
		return badMessage(problemOther, "request has %d messages; the most is %d", n, b.cfg.maxBatch), nil
	}
	res := make([]entryResult, len(req.msgs))
	name, valid := b.validate(req, res)
	if valid < len(res) {
		b.badRequests.Add(1)
	}
	if valid == 0 {
		return nil, res
	}
	t, r := b.topicFor(name)
	if r != nil && valid == len(res) {
		b.badRequests.Add(1)
	}
	if r == nil {
		if r = b.checkTopicType(t, req, res); r != nil && valid == len(res) {
			b.badRequests.Add(1)
		}
	}
	if r == nil && req.queued {
		var done func()
		if done, r = b.sendQueue.wait(ctx, b.stopCh); done != nil {
			defer done()
		}
	}
	var after *refusal
	if r == nil {
		r, after = b.injectFaults(ctx)
	}
	if r == nil {
		if r = b.storeAdmitted(t, req, res, valid); r == nil && after != nil {
			b.faultCount[after.fault].Add(1)
			r = after // stored, and answered as failed all the same
		}
	}
	if r != nil {
		for i := range res {
			if res[i].refused == nil {
				res[i].refused = r
			}
		}
	}
	return nil, res
}

// validate checks each message and refuses the invalid ones in res; with
// req.whole the first invalid message refuses them all. It returns the
// request's topic, the first valid message's, and how many are valid.
func (b *Broker) validate(req sendRequest, res []entryResult) (name string, valid int) {
	nameAt := -1
	for i, m := range req.msgs {
		var r *refusal
		if req.invalid != nil {
			r = req.invalid[i]
		}
		if r == nil {
			r = b.checkMessage(i, m, name, nameAt)
		}
		if r == nil {
			if nameAt < 0 {
				name, nameAt = m.Topic, i
			}
			valid++
			continue
		}
		if req.whole {
			for j := range res {
				res[j].refused = r
			}
			return "", 0
		}
		res[i].refused = r
	}
	return name, valid
}

// storeAdmitted throttles, then stores the messages not refused in res:
// all of them, or none when throttled.
func (b *Broker) storeAdmitted(t *topic, req sendRequest, res []entryResult, valid int) *refusal {
	l := b.throttle.limits()
	now := b.now()
	if r := b.throttle.checkStorageLoad(l, now); r != nil {
		return r
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := b.throttle.admitLocked(t, l, valid, now); r != nil {
		return r
	}
	added, dups := t.storeLocked(&req, res, now, b.cfg.dedupTTL)
	b.throttle.backlogChangedLocked(t, l, now)
	b.stored.Add(added)
	if dups > 0 {
		b.duplicates.Add(dups)
	}
	return nil
}

// topicFor returns the topic named name, created if the broker creates
// topics, or a 404 TOPIC_NOT_FOUND refusal.
func (b *Broker) topicFor(name string) (*topic, *refusal) {
	b.topicsMu.RLock()
	t := b.topics[name]
	b.topicsMu.RUnlock()
	if t != nil {
		return t, nil
	}
	if !b.cfg.autoCreate {
		return nil, &refusal{code: rocketryv1.Code_CODE_TOPIC_NOT_FOUND,
			msg: fmt.Sprintf("broker: topic %q not found (the broker does not create topics)", name)}
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

// checkMessage returns why message i of a request is invalid, or nil.
// name is the request's topic, that of message nameAt, or "" when no
// message before i is valid.
func (b *Broker) checkMessage(i int, m *rocketryv1.Message, name string, nameAt int) *refusal {
	if m == nil {
		return badMessage(problemOther, "message %d: missing", i)
	}
	switch {
	case name == "":
		if msg := checkTopic(m.Topic); msg != "" {
			return badMessage(problemTopic, "message %d: %s", i, msg)
		}
	case m.Topic == "":
		return badMessage(problemTopic, "message %d: empty topic", i)
	case m.Topic != name:
		return badMessage(problemOther, "message %d: topic %s differs from message %d's topic %q; a request carries one topic",
			i, quote(m.Topic), nameAt, name)
	}
	if msg := checkID(m.MessageId); msg != "" {
		return badMessage(problemID, "message %d: %s", i, msg)
	}
	if len(m.Body) > b.cfg.maxBody {
		return &refusal{code: rocketryv1.Code_CODE_MESSAGE_TOO_LARGE,
			msg: fmt.Sprintf("broker: message %d (id %q): body of %d bytes is over the limit of %d bytes",
				i, m.MessageId, len(m.Body), b.cfg.maxBody)}
	}
	if !utf8.ValidString(m.Tag) {
		return badMessage(problemTag, "message %d: tag is not valid UTF-8", i)
	}
	for j, k := range m.Keys {
		if !utf8.ValidString(k) {
			return badMessage(problemKey, "message %d: key %d is not valid UTF-8", i, j)
		}
	}
	for k, v := range m.Properties {
		if k == "" {
			return badMessage(problemProperty, "message %d: a property has an empty name", i)
		}
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return badMessage(problemProperty, "message %d: property %s is not valid UTF-8", i, quote(k))
		}
	}
	return nil
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
