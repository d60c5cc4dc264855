package wirermq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rocketry-go/rocketry/brokercode"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/message"
	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/producer/internal/batch"
	"github.com/rocketry-go/rocketry/producer/internal/send"
	"github.com/rocketry-go/rocketry/producer/internal/wire"
	wirev1 "github.com/rocketry-go/rocketry/producer/internal/wire/v1"
	"github.com/rocketry-go/rocketry/senderr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
)

// rmqCall is the attempter of one message over apache.rocketmq.v2: each
// attempt is a SendMessage of the message to the broker of queue ep of the
// topic's route. The route is read at the first attempt and kept for the
// whole send, so that endpoint ep names the same broker on every attempt
// (a retry after an unknown outcome stays where the message may be, as far
// as the client can say: a proxy in cluster mode gives every broker the
// same endpoints and chooses the broker and queue of each request itself,
// proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/route/RouteActivity.java
// and producer/SendMessageActivity.java). It is used by one goroutine at a
// time, as the executor does.
//
// Writers: the executor's goroutine runs every attempt, and alone writes
// the call's fields, in attempt. The one exception is msg while it is in a
// batch: from join until the batch's answer (which attemptBatched waits
// for) the batch's goroutine owns it and sets its queue
// (rmqBatch.SendBatch).
type rmqCall struct {
	x     send.Executor // the send's, here rather than on the stack the attempts' gRPC calls run on
	c     *rmqClient
	topic string
	msg   *rocketmqv2.Message
	req   rocketmqv2.SendMessageRequest
	route *rmqRoute                       // written by attempt: the route of the first attempt, for the whole send
	peer  peer.Peer                       // written by gRPC in the call: set when the request left the client
	last  rmqQueue                        // written by attempt: the queue of the last attempt
	cn    *rmqConn                        // written by attempt: the connection of the last attempt
	resp  *rocketmqv2.SendMessageResponse // written by attempt: the last answer
	bt    *batch.Batcher                  // set by send, cleared by the first attempt, which joins a batch (async sends); nil: alone
	be    *rmqEntry                       // written by attempt: the message's entry in the batch it joined; nil: none
	own   message.Message                 // written by newWireCall: the copy msg points into; zero from newCall
}

// newCall returns the attempter of m, which must be validated and have its
// ID (the Producer's prepare and the transport's Prepare); m is converted
// once, its slices and map shared.
func (c *rmqClient) newCall(m *message.Message) *rmqCall {
	return c.initCall(&rmqCall{}, m)
}

// newWireCall is newCall of the message the transport was given: a copy
// in the call itself (own), which the v2 message points into (its tag and
// group), so that the copy costs no allocation of its own.
func (c *rmqClient) newWireCall(m message.Message) *rmqCall {
	a := &rmqCall{own: m}
	return c.initCall(a, &a.own)
}

func (c *rmqClient) initCall(a *rmqCall, m *message.Message) *rmqCall {
	a.c, a.topic, a.msg = c, m.Topic, toRMQ(m, c.set.Namespace, c.bornHost, c.now())
	a.req.Messages = []*rocketmqv2.Message{a.msg}
	return a
}

// Attempt is attempt's outcome as the executor reads it
// (send.Attempter).
func (a *rmqCall) Attempt(ctx context.Context, ep int, waitForReady bool, deadline time.Time) (outcome.Outcome, bool) {
	return a.attempt(ctx, ep, waitForReady, deadline)
}

// attempt sends the message to queue ep's broker, waiting for the
// connection within ctx when waitForReady is set. unsent reports that the
// request never left the client: the body is over the server's
// max_body_size (Permanent, MESSAGE_TOO_LARGE), the route could not be
// read, or gRPC failed the call before it reached a transport (no peer).
func (a *rmqCall) attempt(ctx context.Context, ep int, waitForReady bool, deadline time.Time) (outcome.Outcome, bool) {
	if n := a.c.maxBodySize(); n > 0 && len(a.msg.Body) > n {
		err := fmt.Errorf("%w: body is %d bytes, over the server's max_body_size of %d", senderr.ErrInvalidMessage, len(a.msg.Body), n)
		return outcome.Outcome{Kind: outcome.Permanent, Code: brokercode.MessageTooLarge, Err: err}, true
	}
	if !a.cachedRoute() {
		rctx, cancel := send.AttemptContext(ctx, deadline)
		r, err := a.c.route(rctx, a.topic)
		cancel()
		if err != nil {
			return routeOutcome(err), true // a refusal is a *senderr.AuthError already (queryRoute)
		}
		a.route = r
	}
	q := a.route.queue(ep)
	cn, err := a.c.conn(q.addr)
	if err != nil {
		return outcome.Outcome{Kind: outcome.FailedNotStored, Err: err}, true
	}
	a.cn = cn
	if a.bt != nil {
		if o, unsent, at, ok := a.attemptBatched(ctx, q, cn, deadline); ok {
			a.last = at
			return a.unconfirmed(a.c.refused(o, q.addr), q.addr), unsent
		}
	}
	ctx, cancel := send.AttemptContext(ctx, deadline)
	defer cancel()
	a.last = q
	a.msg.SystemProperties.QueueId = q.id
	a.peer = peer.Peer{}
	opts := []grpc.CallOption{grpc.Peer(&a.peer)}
	if waitForReady {
		opts = append(opts, grpc.WaitForReady(true))
	}
	resp, err := cn.stub.SendMessage(a.c.outgoing(ctx), &a.req, opts...)
	a.resp = resp
	o, unsent := wire.NotSent(Classify(resp, err), err, &a.peer, q.addr)
	return a.unconfirmed(a.c.refused(o, q.addr), q.addr), unsent
}

// unconfirmed reads a stored answer whose flush or replication the broker
// did not confirm (rmqUnconfirmed: HA_NOT_AVAILABLE,
// MASTER_PERSISTENCE_TIMEOUT, SLAVE_PERSISTENCE_TIMEOUT), o otherwise
// unchanged. The message is in the leader's log, so it is Stored and sent
// no more, and the client logs a warning naming the code and the message.
// A half message is the exception: the proxy answers such a status without
// the transaction ID that EndTransaction needs (SendMessageActivity.java
// convertToSendMessageResponse; ProducerProcessor.java records a
// transaction only for SEND_OK), so its transaction cannot be ended by the
// client: it is FailedUnknown, never retried, and left to the broker's
// check, as after any unknown outcome of a half message.
func (a *rmqCall) unconfirmed(o outcome.Outcome, addr string) outcome.Outcome {
	if o.Kind != outcome.Stored || !rmqUnconfirmed(o.WireCode) {
		return o
	}
	code := rocketmqv2.Code(o.WireCode).String()
	id := a.msg.GetSystemProperties().GetMessageId()
	if a.msg.GetSystemProperties().GetMessageType() == rocketmqv2.MessageType_TRANSACTION {
		o.Kind = outcome.FailedUnknown
		o.Err = &senderr.StatusError{Code: o.WireCode, Message: code + ": the half message is in the broker's log without a transaction ID; the broker's check resolves it"}
		return o
	}
	a.c.logger.Warn("rocketmq: message stored, its flush or replication not confirmed",
		"code", code, "wire_code", o.WireCode, "message_id", id, "topic", a.topic, "endpoint", addr)
	return o
}

// routeOutcome reads the error of a route look-up, which sent nothing: the
// server's status (TOPIC_NOT_FOUND is Permanent), a gRPC error as
// producer.GRPCClassifier reads it (wirev1.Classify), and a route without
// a writable queue, the client's end or the caller's context as failures
// known not stored.
func routeOutcome(err error) outcome.Outcome {
	var se *senderr.StatusError
	switch {
	case errors.As(err, &se):
		o := StatusOutcome(se)
		if ae := (*senderr.AuthError)(nil); errors.As(err, &ae) {
			o.Err = ae
		}
		return o
	case errors.Is(err, errNoWritableQueue), errors.Is(err, senderr.ErrClosed):
		return outcome.Outcome{Kind: outcome.FailedNotStored, Err: err}
	}
	o := wirev1.Classify(err)
	if o.Kind == outcome.FailedUnknown {
		o.Kind = outcome.FailedNotStored // nothing was sent
	}
	return o
}

// endpoint names endpoint ep: the broker of its queue, or "rocketmq:" and
// the topic while its route is neither read nor cached.
func (a *rmqCall) Endpoint(ep int) string {
	if !a.cachedRoute() {
		return "rocketmq:" + a.topic
	}
	return a.route.queue(ep).broker
}

// pinName is the pin of endpoint ep, which a send's MaybeStoredAt carries
// and Resend finds again (findRMQPin): the broker's name and its
// endpoints, "broker-a@host:port[;host:port]", since a broker name alone
// is not unique (every bundled broker is broker-0 by default; clusters
// reuse broker-a) and a new broker of the same name elsewhere does not
// hold the message. Before the route is read it is endpoint(ep).
func (a *rmqCall) PinName(ep int) string {
	if !a.cachedRoute() {
		return a.Endpoint(ep)
	}
	q := a.route.queue(ep)
	return q.broker + "@" + q.addr
}

// reach is the reach of the connection of the call's last attempt, which
// is queue ep's broker's when asked (after an attempt on ep, or before a
// retry to the same broker); none before the first attempt.
func (a *rmqCall) Reach(int) *send.Reach {
	if a.cn == nil {
		return &send.Reach{}
	}
	return &a.cn.reach
}

// cachedRoute takes the topic's route from the client's cache when the
// call has none yet, without a request; it reports whether the call has
// a route.
func (a *rmqCall) cachedRoute() bool {
	if a.route == nil {
		a.c.mu.Lock()
		a.route = a.c.routes[a.topic]
		a.c.mu.Unlock()
		if a.route != nil {
			a.route.touch(a.c.now())
		}
	}
	return a.route != nil
}

// result is what the broker said of the stored message: its queue, its
// offset and, for a half message, its transaction id. ok is false before a
// stored answer.
func (a *rmqCall) result() (queueID int32, offset int64, transactionID string, ok bool) {
	var e *rocketmqv2.SendResultEntry
	switch es := a.resp.GetEntries(); {
	case len(es) > 0:
		e = es[0]
	case a.resp == nil && a.be != nil:
		e = a.be.Msg.res // stored in its batch
	}
	if e == nil {
		return 0, 0, "", false
	}
	return a.last.id, e.GetOffset(), e.GetTransactionId(), true
}
