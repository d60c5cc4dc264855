package bench

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// The shapes of throttling the hintless server plays (issue 20: pacing
// must follow what the broker accepts, whatever the shape). Every refusal
// is RESOURCE_EXHAUSTED with the ErrorDetail 530 and no RetryInfo.
const (
	// ShapeBucket is a token bucket of Rate messages per second and Burst,
	// for every topic (THROTTLE_REASON_SEND_RATE).
	ShapeBucket = "bucket"
	// ShapeHot refuses topic "hot" always (THROTTLE_REASON_BACKLOG: too
	// many unconsumed messages) and stores every other topic.
	ShapeHot = "hot"
	// ShapeOneInTen refuses one message in ten (by a hash of its ID), once:
	// a spike of refusals that are the messages' own, not a rate.
	ShapeOneInTen = "oneinten"
	// ShapeQueue is a send queue served at Rate messages per second that
	// refuses a request once it has waited over 200 ms in it, as a RocketMQ
	// broker's fast failure does ("[TIMEOUT_CLEAN_QUEUE]broker busy",
	// broker/src/main/java/org/apache/rocketmq/broker/latency/BrokerFastFailure.java,
	// waitTimeMillsInSendQueue 200 ms by default): state-based flow
	// control, no rate at all in the refusal.
	ShapeQueue = "queue"
	// ShapeHotCold is a token bucket of Rate messages per second and Burst
	// for topic "hot" alone, refusing as ShapeBucket does (530 SEND_RATE),
	// and every other topic stored always: a throttled topic beside an
	// open one (see runHotCold).
	ShapeHotCold = "hot-cold"
)

// Shapes lists the shapes.
var Shapes = []string{ShapeBucket, ShapeHot, ShapeOneInTen, ShapeQueue, ShapeHotCold}

// hotTopic is the topic ShapeHot refuses and ShapeHotCold throttles;
// coldTopic is the open one beside it.
const (
	hotTopic  = "hot"
	coldTopic = "cold"
)

// queueWait is how long a request may wait in ShapeQueue's send queue.
const queueWait = 200 * time.Millisecond

// sendQueue is ShapeQueue's queue: one server, perSecond requests a second.
type sendQueue struct {
	perSecond float64
	mu        sync.Mutex
	free      time.Time // when the server has served every request queued
}

// enter queues a request that arrives at now: the wait before it is
// served, or false when that wait is over queueWait (the request is
// cleaned out of the queue after queueWait).
func (q *sendQueue) enter(now time.Time, n int) (time.Duration, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	at := now
	if q.free.After(now) {
		at = q.free
	}
	if at.Sub(now) > queueWait {
		return queueWait, false
	}
	q.free = at.Add(time.Duration(float64(n) * float64(time.Second) / q.perSecond))
	return at.Sub(now), true
}

// admit says whether req (n messages) is stored, as the shape decides, or
// its refusal.
func (s *hintlessServer) admit(ctx context.Context, req *rocketryv1.SendMessageRequest, n int) error {
	switch s.shape {
	case ShapeHot:
		if req.GetMessages()[0].GetTopic() == hotTopic {
			return s.refusalOf(rocketryv1.ThrottleReason_THROTTLE_REASON_BACKLOG, s.msg)
		}
	case ShapeOneInTen:
		id := req.GetMessages()[0].GetMessageId()
		h := fnv.New32a()
		_, _ = h.Write([]byte(id))
		if h.Sum32()%10 == 0 {
			if _, again := s.seen.LoadOrStore(id, true); !again {
				return s.refusalOf(rocketryv1.ThrottleReason_THROTTLE_REASON_UNSPECIFIED, s.msg)
			}
		}
	case ShapeHotCold:
		if req.GetMessages()[0].GetTopic() == hotTopic {
			return s.bucket(n)
		}
	case ShapeQueue:
		wait, ok := s.queue.enter(time.Now(), n)
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
		if !ok {
			return s.refusalOf(rocketryv1.ThrottleReason_THROTTLE_REASON_UNSPECIFIED,
				fmt.Sprintf("[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: %dms", wait.Milliseconds()))
		}
	default:
		return s.bucket(n)
	}
	return nil
}

// bucket takes n messages from the token bucket (ShapeBucket's, with its
// capacity schedule if any; ShapeHotCold's for topic "hot"), or refuses
// them as ShapeBucket does.
func (s *hintlessServer) bucket(n int) error {
	now := time.Now()
	if s.sched != nil {
		s.sched.apply(s.lim, now)
	}
	if !s.lim.AllowN(now, min(n, s.burst)) {
		return s.refusal()
	}
	return nil
}

// refusalOf is a refusal with reason and msg.
func (s *hintlessServer) refusalOf(reason rocketryv1.ThrottleReason, msg string) error {
	st, err := status.New(codes.ResourceExhausted, msg).WithDetails(&rocketryv1.ErrorDetail{
		Code:   rocketryv1.Code_CODE_TOO_MANY_REQUESTS,
		Reason: reason,
	})
	if err != nil {
		return status.Error(codes.Internal, "bench: "+err.Error())
	}
	return st.Err()
}
