package broker

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"google.golang.org/protobuf/proto"
)

// consumerServer serves rocketryv1.ConsumerService.
type consumerServer struct {
	rocketryv1.UnimplementedConsumerServiceServer
	b *Broker
}

// consumerTopic validates a consumer call's topic and group and returns the
// topic, created when the broker creates topics.
func (b *Broker) consumerTopic(topicName, groupName string) (*topic, error) {
	if msg := checkTopic(topicName); msg != "" {
		return nil, b.refuse(badRequest(msg))
	}
	if msg := checkName("group", groupName, maxTopicLen); msg != "" {
		return nil, b.refuse(badRequest(msg))
	}
	t, r := b.topicFor(topicName)
	if r != nil {
		return nil, b.refuse(r.status())
	}
	return t, nil
}

// refuse counts a 4xx answer and returns it.
func (b *Broker) refuse(err error) error {
	b.badRequests.Add(1)
	return err
}

// ReceiveMessages returns up to max_messages messages from the group's
// committed offsets, taking one message from each queue in turn, so that
// every queue's messages come in offset order. A new group starts at offset
// 0 of every queue. Without auto_commit the offsets stay where they were
// and the next call returns the same messages.
func (s consumerServer) ReceiveMessages(ctx context.Context, req *rocketryv1.ReceiveMessagesRequest) (*rocketryv1.ReceiveMessagesResponse, error) {
	b := s.b
	t, err := b.consumerTopic(req.GetTopic(), req.GetGroup())
	if err != nil {
		return nil, err
	}
	n := int(req.GetMaxMessages())
	switch {
	case n < 0:
		return nil, b.refuse(badRequest(fmt.Sprintf("max_messages %d is negative", n)))
	case n == 0:
		n = b.cfg.defaultRecvN
	case n > MaxReceiveMessages:
		n = MaxReceiveMessages
	}
	l := b.throttle.limits()
	now := b.now()
	resp := &rocketryv1.ReceiveMessagesResponse{}
	var cold int64

	t.mu.Lock()
	t.promoteLocked(now)
	g := t.groupLocked(req.GetGroup())
	offs := make([]int64, len(t.queues))
	copy(offs, g.committed)
	for len(resp.Messages) < n {
		progressed := false
		for q, log := range t.queues {
			off := offs[q]
			if off >= int64(len(log)) {
				continue
			}
			if l.cold(len(log), off) {
				cold++
			}
			resp.Messages = append(resp.Messages, &rocketryv1.ReceivedMessage{Message: log[off], QueueId: int32(q), Offset: off})
			offs[q]++
			progressed = true
			if len(resp.Messages) == n {
				break
			}
		}
		if !progressed {
			break
		}
	}
	if req.GetAutoCommit() {
		var forward int64
		for q, off := range offs {
			forward += t.commitLocked(g, q, off)
		}
		b.throttle.consumedLocked(t, l, now, forward)
		b.throttle.backlogChangedLocked(t, l, now)
	}
	t.mu.Unlock()

	b.throttle.coldReads(l, now, cold)
	return resp, nil
}

// CommitOffset sets the group's committed offset of one queue, from 0 to
// the queue's head.
func (s consumerServer) CommitOffset(ctx context.Context, req *rocketryv1.CommitOffsetRequest) (*rocketryv1.CommitOffsetResponse, error) {
	b := s.b
	t, err := b.consumerTopic(req.GetTopic(), req.GetGroup())
	if err != nil {
		return nil, err
	}
	l := b.throttle.limits()
	now := b.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.promoteLocked(now)
	q := req.GetQueueId()
	if q < 0 || int(q) >= len(t.queues) {
		return nil, b.refuse(badRequest(fmt.Sprintf("queue_id %d is not a queue of topic %q (0..%d)", q, t.name, len(t.queues)-1)))
	}
	head := int64(len(t.queues[q]))
	if off := req.GetOffset(); off < 0 || off > head {
		return nil, b.refuse(badRequest(fmt.Sprintf("offset %d is outside 0..%d (the head of queue %d)", off, head, q)))
	}
	g := t.groupLocked(req.GetGroup())
	b.throttle.consumedLocked(t, l, now, t.commitLocked(g, int(q), req.GetOffset()))
	b.throttle.backlogChangedLocked(t, l, now)
	return &rocketryv1.CommitOffsetResponse{}, nil
}

// ResetOffset moves the group's committed offset of every queue to the
// request's offset, capped at each queue's head.
func (s consumerServer) ResetOffset(ctx context.Context, req *rocketryv1.ResetOffsetRequest) (*rocketryv1.ResetOffsetResponse, error) {
	b := s.b
	t, err := b.consumerTopic(req.GetTopic(), req.GetGroup())
	if err != nil {
		return nil, err
	}
	if off := req.GetOffset(); off < 0 {
		return nil, b.refuse(badRequest(fmt.Sprintf("offset %d is negative", off)))
	}
	l := b.throttle.limits()
	now := b.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.promoteLocked(now)
	g := t.groupLocked(req.GetGroup())
	for q, log := range t.queues {
		t.commitLocked(g, q, min(req.GetOffset(), int64(len(log))))
	}
	b.throttle.backlogChangedLocked(t, l, now)
	b.log.Info("broker: offsets reset", "topic", t.name, "group", req.GetGroup(), "offset", req.GetOffset())
	return &rocketryv1.ResetOffsetResponse{}, nil
}

// GetStats answers b.Stats().
func (s consumerServer) GetStats(ctx context.Context, req *rocketryv1.GetStatsRequest) (*rocketryv1.GetStatsResponse, error) {
	return s.b.Stats(), nil
}

// Messages returns copies of every stored message of topic with their
// queue and offset, by queue then offset, then the timed messages not due
// yet, the first due first, with the queue they will join and offset -1;
// nil for an unknown topic. It is meant for tests' invariant checks.
func (b *Broker) Messages(topicName string) []*rocketryv1.ReceivedMessage {
	t := b.lookupTopic(topicName)
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.promoteLocked(b.now())
	out := make([]*rocketryv1.ReceivedMessage, 0, int(t.stored)+len(t.timed))
	for q, log := range t.queues {
		for off, m := range log {
			out = append(out, &rocketryv1.ReceivedMessage{
				Message: proto.Clone(m).(*rocketryv1.Message), QueueId: int32(q), Offset: int64(off),
			})
		}
	}
	timed := slices.Clone(t.timed)
	slices.SortFunc(timed, func(x, y timedMessage) int {
		if c := x.at.Compare(y.at); c != 0 {
			return c
		}
		return cmp.Compare(x.seq, y.seq)
	})
	for _, e := range timed {
		out = append(out, &rocketryv1.ReceivedMessage{
			Message: proto.Clone(e.msg).(*rocketryv1.Message), QueueId: int32(e.queue), Offset: -1,
		})
	}
	return out
}
