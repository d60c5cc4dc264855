package producer

import (
	"context"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"google.golang.org/grpc"
)

// UnaryClientInterceptor returns an interceptor that brings the Producer's
// retry contract to any unary call of any service: the same decision
// function and loop as Producer.Send, with the same options and defaults.
// Throttling is RESOURCE_EXHAUSTED (or a rocketry ErrorDetail with 530),
// failures are UNAVAILABLE, INTERNAL, UNKNOWN, ABORTED, an attempt's timeout
// and a lost connection, and every other code is returned at once. A
// SendMessageRequest's messages are treated as in Producer.Send: events
// carry the first message's ID, and a request with a transactional message
// is not retried after an unknown outcome. All attempts go to the call's
// connection.
//
// A failed call returns a *SendError (status.Code and status.FromError see
// the last attempt's status through it). Per-call options are given with
// WithCallOptions. WithMaxInFlight, WithFallback, WithSpool, WithMaxBodyBytes
// and WithDialOptions do not apply here; invalid options make every call
// fail with the error naming the option, without an attempt.
func UnaryClientInterceptor(opts ...Option) grpc.UnaryClientInterceptor {
	base, err := build(scopeInterceptor, "UnaryClientInterceptor", opts)
	if err != nil {
		return func(context.Context, string, any, any, *grpc.ClientConn, grpc.UnaryInvoker, ...grpc.CallOption) error {
			return err
		}
	}
	// One watchdog for every call, whatever its per-call options (which
	// copy base, not wd).
	wd := &watchdog{}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, copts ...grpc.CallOption) error {
		cfg, copied := &base, false
		for _, o := range copts {
			if co, ok := o.(callOption); ok {
				if !copied { // per-call options apply to a copy
					c := base
					cfg, copied = &c, true
				}
				if err := cfg.applyAll(scopeCall, "WithCallOptions", co.opts); err != nil {
					return err
				}
			}
		}
		st := callState{}
		if cc != nil {
			st.target = cc.Target()
		}
		if r, ok := req.(*rocketryv1.SendMessageRequest); ok {
			for i, m := range r.GetMessages() {
				if i == 0 {
					st.id = m.GetMessageId()
				}
				st.transactional = st.transactional || m.GetTransactional()
			}
		}
		err := cfg.run(ctx, nil, wd, &st, func(ctx context.Context, _ int, wait bool) error {
			if wait {
				return invoker(ctx, method, req, reply, cc, append(copts[:len(copts):len(copts)], waitForReady)...)
			}
			return invoker(ctx, method, req, reply, cc, copts...)
		})
		if err != nil {
			cfg.failed(&st, err.(*SendError))
			return err
		}
		return nil
	}
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
// WithFailureSchedule, WithRand, WithObserver, WithLogger; another, or an
// invalid value, makes the call fail without an attempt, with an error
// naming the option.
func WithCallOptions(opts ...Option) grpc.CallOption {
	return callOption{opts: opts}
}
