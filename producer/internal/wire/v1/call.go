package wirev1

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/timestamppb"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/message"
	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/producer/internal/batch"
	"github.com/rocketry-go/rocketry/producer/internal/pace"
	"github.com/rocketry-go/rocketry/producer/internal/send"
	"github.com/rocketry-go/rocketry/producer/internal/wire"
	"github.com/rocketry-go/rocketry/senderr"
)

// This file holds rocketry.v1's attempter: sendCall makes one SendMessage
// per attempt (alone, or its message in a batch), and Transport.Send runs
// the executor over it. apache.rocketmq.v2's is in producer/internal/wire/rocketmq (call.go).

// sendMethod is the full name of MessagingService.SendMessage.
const sendMethod = "/rocketry.v1.MessagingService/SendMessage"

// sendCall is one rocketry.v1 send: its attempter and everything it
// allocates, in one allocation (the receipt it returns, the request, the
// response).
type sendCall struct {
	t       *Transport
	receipt message.Receipt
	msg     rocketryv1.Message
	ptrs    [1]*rocketryv1.Message
	req     rocketryv1.SendMessageRequest
	resp    rocketryv1.SendMessageResponse
	peer    peer.Peer // filled by gRPC when the request left the client
	opts    [numCallOpts]grpc.CallOption
	bt      *batch.Batcher // set by Send, cleared by the first attempt, which joins a batch (async sends); nil: alone
	set     *endpointSet   // the send's endpoints; with a scheme, held from the first attempt
	// The send's executor: here rather than on Send's stack, which the
	// attempts' gRPC calls run on top of (a goroutine's first 8 KiB).
	x send.Executor
}

// The call options of an attempt: grpc.Peer(&peer), then wait-for-ready
// when the attempt waits for its connection.
const numCallOpts = 2

// WaitForReady makes an attempt wait for its connection within its
// timeout (the producer's interceptor uses it too).
var WaitForReady = grpc.WaitForReady(true)

// Send runs the executor over rocketry.v1.
func (t *Transport) Send(ctx context.Context, m message.Message, bt *batch.Batcher, pn *send.Pin) (*message.Receipt, *senderr.SendError) {
	c := &sendCall{t: t, set: t.eps}
	switch {
	case pn != nil && pn.Hold != nil:
		c.set = pn.Hold.(*endpointSet) // acquired by FindPin: the set pn.EP indexes
	case t.targets != nil:
		c.set = t.targets.tryAcquire() // nil before the resolver's first answer: the attempt waits
	}
	c.bt = bt
	c.msg.MessageId = m.ID
	c.msg.Topic = m.Topic
	c.msg.Tag = m.Tag
	c.msg.Keys = m.Keys
	c.msg.Properties = m.Properties
	c.msg.Body = m.Body
	c.msg.Transactional = m.Transactional
	c.msg.MessageGroup = m.MessageGroup
	if !m.DeliveryTime.IsZero() {
		c.msg.DeliveryTime = timestamppb.New(m.DeliveryTime)
	}
	c.ptrs[0] = &c.msg
	c.req.Messages = c.ptrs[:]
	c.opts[0] = grpc.Peer(&c.peer)

	ep := 0
	if t.targets != nil || len(t.eps.eps) > 1 {
		ep = int(t.next.Add(1))
	}
	c.x.Init(t.env.Cfg, c, send.Facts{ID: m.ID, Transactional: m.Transactional, EP: ep, Group: m.MessageGroup, Pin: pn})
	f := wire.Run(ctx, &c.x)
	if t.targets != nil && c.set != nil {
		t.targets.release(c.set)
	}
	c.set = nil
	// The receipt keeps c alive: drop the references to the caller's data.
	c.msg.Keys, c.msg.Properties, c.msg.Body = nil, nil, nil
	if f != nil {
		return nil, f
	}
	r := c.resp.Results[0]
	c.receipt = message.Receipt{MessageID: m.ID, QueueID: r.GetQueueId(), Offset: r.GetOffset(), Duplicate: r.GetDuplicate(), Attempts: c.x.Attempts()}
	c.resp.Results = nil
	return &c.receipt, nil
}

func (c *sendCall) Endpoint(ep int) string {
	if c.set == nil {
		return c.t.targets.target // not resolved yet
	}
	return c.set.at(ep).name
}

func (c *sendCall) Pacer(ep int) pace.Pace {
	if !c.t.env.Pacing || c.set == nil {
		return pace.Pace{}
	}
	return c.set.at(ep).pace.Of(c.msg.Topic)
}

func (c *sendCall) Reach(ep int) *send.Reach {
	if c.set == nil {
		return &send.Reach{} // not resolved yet: never reached
	}
	return &c.set.at(ep).reach
}

// Attempt is attempt's outcome as the executor reads it
// (send.Attempter).
func (c *sendCall) Attempt(ctx context.Context, ep int, waitForReady bool, deadline time.Time) (outcome.Outcome, bool) {
	return c.attempt(ctx, ep, waitForReady, deadline)
}

// attempt makes one attempt on endpoint ep. gRPC fills c.peer only when the
// request left on a transport: an attempt that fails with c.peer empty was
// never sent, so its message is known not stored (and when gRPC says the
// broker could not be reached, the outcome names why: a
// *senderr.ConnectError, wire.NotSent).
func (c *sendCall) attempt(ctx context.Context, ep int, wait bool, deadline time.Time) (outcome.Outcome, bool) {
	if c.set == nil {
		if o, ok := c.resolve(ctx, deadline); !ok {
			return o, true
		}
	}
	e := c.set.at(ep)
	if c.bt != nil {
		if o, unsent, ok := c.attemptBatched(ctx, e, deadline); ok {
			return o, unsent
		}
	}
	ctx, cancel := send.AttemptContext(ctx, deadline)
	defer cancel()
	c.peer = peer.Peer{}
	opts := c.opts[:1]
	if wait {
		opts = append(opts, WaitForReady)
	}
	err := e.cc.Invoke(ctx, sendMethod, &c.req, &c.resp, opts...)
	if err == nil {
		if n := len(c.resp.Results); n != 1 {
			err = fmt.Errorf("producer: broker answered %d results for one message", n)
			return outcome.Outcome{Kind: outcome.FailedUnknown, Err: err}, false
		}
		return outcome.Outcome{Kind: outcome.Stored}, false
	}
	return wire.NotSent(Classify(err), err, &c.peer, e.name)
}

// resolve takes the endpoints of a target with a scheme for the rest of
// the send, waiting for the resolver's first answer within the attempt; ok
// is false when there is none (the attempt's outcome, known not stored).
func (c *sendCall) resolve(ctx context.Context, deadline time.Time) (o outcome.Outcome, ok bool) {
	actx, cancel := send.AttemptContext(ctx, deadline)
	s, err := c.t.targets.acquire(actx)
	cancel()
	if err != nil {
		return outcome.Outcome{Kind: outcome.FailedNotStored, Err: err}, false
	}
	c.set = s
	return outcome.Outcome{}, true
}
