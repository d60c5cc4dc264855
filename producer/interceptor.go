package producer

import (
	"context"
	"sync"
	"time"

	"github.com/rocketry-go/rocketry/brokercode"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/producer/internal/pace"
	"github.com/rocketry-go/rocketry/producer/internal/send"
	"github.com/rocketry-go/rocketry/producer/internal/wire"
	wirev1 "github.com/rocketry-go/rocketry/producer/internal/wire/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// NewUnaryClientInterceptor returns an interceptor that brings the
// Producer's retry contract to any unary call of any service: the same
// executor and decisions as Producer.Send, with the same options and
// defaults. Each attempt's reply or error is read by the classifier
// (WithClassifier): by default apache.rocketmq.v2 SendMessageResponse
// bodies are read as RocketMQ 5 statuses, and everything else as gRPC
// statuses (GRPCClassifier: RESOURCE_EXHAUSTED throttles; UNAVAILABLE,
// INTERNAL, UNKNOWN, ABORTED, an attempt's timeout and a lost connection
// are failures; every other code is returned at once). A rocketry.v1
// SendMessageRequest's messages are treated as in Producer.Send: events
// carry the first message's ID, and a request with a transactional message
// is not retried after an unknown outcome. An apache.rocketmq.v2
// SendMessageRequest's are treated as the Producer's over RocketMQ 5:
// events carry the first message's ID, and a request with a TRANSACTION
// (half) message is not retried after an unknown outcome, which may have
// stored the half message already. All attempts go to the call's
// connection.
//
// A request larger than the call's grpc.MaxCallSendMsgSize fails before
// any attempt. A failed call returns a *SendError (status.Code and
// status.FromError see the last attempt's status through it). Per-call
// options are given with WithCallOptions. WithMaxInFlight, WithFallback,
// WithDeadLetterSink, WithMaxBodyBytes, WithDialOptions, WithFailoverOnUnknownOutcome
// and WithHook do not apply here. Options are validated here: an invalid one is an
// *OptionError naming it.
func NewUnaryClientInterceptor(opts ...Option) (grpc.UnaryClientInterceptor, error) {
	base, err := build(scopeInterceptor, "UnaryClientInterceptor", opts)
	if err != nil {
		return nil, err
	}
	var byTarget sync.Map // target -> *pace.Pacers, when pacing
	// Calls under context.Background() share their attempts' deadline
	// timers (send.AttemptContext), as a Producer's sends do.
	shared := send.NewShared(context.Background())
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, copts ...grpc.CallOption) error {
		if ctx == context.Background() {
			ctx = shared
		}
		cfg, copied := &base, false
		for _, o := range copts {
			if co, ok := o.(callOption); ok {
				if !copied { // per-call options apply to a copy
					c := base
					if !c.attemptsSet {
						// Derived from the interceptor's throttle schedule:
						// settleAttempts derives it again from the call's.
						c.MaxAttempts = DefaultMaxAttempts
					}
					cfg, copied = &c, true
				}
				if err := cfg.applyAll(scopeCall, "WithCallOptions", co.opts); err != nil {
					return err
				}
				cfg.settleAttempts()
				cfg.events()
			}
		}
		c := &interceptCall{method: method, req: req, reply: reply, cc: cc, invoker: invoker, cls: cfg.classifier}
		if base.pacing && cc != nil {
			pc, ok := byTarget.Load(cc.Target())
			if !ok {
				pc, _ = byTarget.LoadOrStore(cc.Target(), &pace.Pacers{})
			}
			c.pc = pc.(*pace.Pacers).Of(paceScope(method, req))
		}
		c.opts = append(make([]grpc.CallOption, 0, len(copts)+2), copts...)
		c.opts = append(c.opts, grpc.Peer(&c.peer))
		c.x.Init(&cfg.Config, c, callFacts(req))
		if o, ok := tooLargeToSend(req, copts); !ok {
			se := sendError(c.x.Refuse(o, send.EndNotRetryable))
			cfg.finish(ctx, se)
			return se
		}
		if se := runSend(ctx, &c.x); se != nil {
			cfg.finish(ctx, se)
			return se
		}
		return nil
	}, nil
}

// UnaryClientInterceptor is NewUnaryClientInterceptor for use where an
// error cannot be returned, such as in a grpc.NewClient argument list. It
// panics with the *OptionError when an option is invalid, as
// regexp.MustCompile does: options are the program's, not its input.
func UnaryClientInterceptor(opts ...Option) grpc.UnaryClientInterceptor {
	i, err := NewUnaryClientInterceptor(opts...)
	if err != nil {
		panic(err)
	}
	return i
}

// callFacts are the send facts of a call's request. A rocketry.v1
// SendMessageRequest's are as in Producer.Send: the first message's ID,
// and transactional when one of its messages is. An apache.rocketmq.v2
// SendMessageRequest's are as in the RocketMQ 5 transport: the first
// message's ID, and a half message (retried only when known not stored,
// as Transaction.Send's) when one of its messages is of type TRANSACTION.
// Any other request has none.
func callFacts(req any) send.Facts {
	var f send.Facts
	switch r := req.(type) {
	case *rocketryv1.SendMessageRequest:
		for i, m := range r.GetMessages() {
			if i == 0 {
				f.ID = m.GetMessageId()
			}
			f.Transactional = f.Transactional || m.GetTransactional()
		}
	case *rocketmqv2.SendMessageRequest:
		for i, m := range r.GetMessages() {
			if i == 0 {
				f.ID = m.GetSystemProperties().GetMessageId()
			}
			if m.GetSystemProperties().GetMessageType() == rocketmqv2.MessageType_TRANSACTION {
				f.Transactional, f.Half = true, true
			}
		}
	}
	return f
}

// interceptCall is the attempter of one call through the interceptor.
type interceptCall struct {
	x       send.Executor // the call's, here rather than on the stack the attempts run on
	method  string
	req     any
	reply   any
	cc      *grpc.ClientConn
	invoker grpc.UnaryInvoker
	cls     Classifier
	opts    []grpc.CallOption // the call's, then grpc.Peer(&peer)
	peer    peer.Peer
	pc      pace.Pace // the target's, and the topic's there
}

func (c *interceptCall) Pacer(int) pace.Pace { return c.pc }

// paceScope is the scope of a call's pacer at its target
// (internal/send/pacing.go): a send's topic, else the method.
func paceScope(method string, req any) string {
	if r, ok := req.(*rocketryv1.SendMessageRequest); ok && len(r.GetMessages()) > 0 {
		return r.GetMessages()[0].GetTopic()
	}
	return method
}

// reach is none: the interceptor keeps no state per broker, so a retry to
// its target waits for the connection unless WithWaitForReady(false).
func (c *interceptCall) Reach(int) *send.Reach { return nil }

func (c *interceptCall) Endpoint(int) string {
	if c.cc == nil {
		return ""
	}
	return c.cc.Target()
}

// Attempt is attempt's outcome as the executor reads it
// (send.Attempter).
func (c *interceptCall) Attempt(ctx context.Context, ep int, waitForReady bool, deadline time.Time) (Outcome, bool) {
	return c.attempt(ctx, ep, waitForReady, deadline)
}

func (c *interceptCall) attempt(ctx context.Context, _ int, wait bool, deadline time.Time) (Outcome, bool) {
	ctx, cancel := send.AttemptContext(ctx, deadline)
	defer cancel()
	c.peer = peer.Peer{}
	opts := c.opts
	if wait {
		opts = append(opts[:len(opts):len(opts)], wirev1.WaitForReady)
	}
	err := c.invoker(ctx, c.method, c.req, c.reply, c.cc, opts...)
	return wire.NotSent(c.cls.Classify(c.reply, err), err, &c.peer, c.Endpoint(0))
}

// tooLargeToSend fails a request over the call's grpc.MaxCallSendMsgSize
// before any attempt, as gRPC would refuse each attempt: ok is false, and
// the outcome says why.
func tooLargeToSend(req any, copts []grpc.CallOption) (Outcome, bool) {
	limit := -1
	for _, o := range copts {
		if m, ok := o.(grpc.MaxSendMsgSizeCallOption); ok {
			limit = m.MaxSendMsgSize
		}
	}
	pm, ok := req.(proto.Message)
	if limit < 0 || !ok {
		return Outcome{}, true
	}
	if n := proto.Size(pm); n > limit {
		cause := status.Errorf(codes.ResourceExhausted, "producer: request of %d bytes is larger than the call's MaxCallSendMsgSize of %d", n, limit)
		return Outcome{Kind: Permanent, Code: brokercode.MessageTooLarge, Err: cause}, false
	}
	return Outcome{}, true
}

// callOption carries per-call options through grpc.CallOption.
type callOption struct {
	grpc.EmptyCallOption
	opts []Option
}

// WithCallOptions returns a grpc.CallOption that applies opts to one call
// through UnaryClientInterceptor, on a copy of the interceptor's options
// (go-grpc-middleware style). Only options that apply per call may be
// given: WithMaxAttempts, WithAttemptTimeout, WithThrottleSchedule,
// WithFailureSchedule, WithRand, WithObserver, WithLogger, WithClassifier; another, or an
// invalid value, makes the call fail without an attempt, with an error
// naming the option.
func WithCallOptions(opts ...Option) grpc.CallOption {
	return callOption{opts: opts}
}
