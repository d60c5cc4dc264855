package producer

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/brokercode"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// The loose ends of the retry contract: each test here failed before the
// send executor.

// deadlineStub records the deadline each call arrived with on the server.
type deadlineStub struct {
	rocketryv1.UnimplementedMessagingServiceServer
	left atomic.Int64 // time left at the server, of the last call; -1: none
}

func (s *deadlineStub) SendMessage(ctx context.Context, req *rocketryv1.SendMessageRequest) (*rocketryv1.SendMessageResponse, error) {
	s.left.Store(-1)
	if dl, ok := ctx.Deadline(); ok {
		s.left.Store(int64(time.Until(dl)))
	}
	out := &rocketryv1.SendMessageResponse{}
	for _, m := range req.GetMessages() {
		out.Results = append(out.Results, &rocketryv1.SendResult{MessageId: m.GetMessageId()})
	}
	return out, nil
}

func serve(t *testing.T, register func(*grpc.Server), opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(opts...)
	register(srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// TestAttemptDeadlineReachesTheServer: the attempt's timeout is sent as
// grpc-timeout, by the Producer and by the interceptor, so the server can
// drop work whose caller has gone. Regression: the watchdog sent none.
func TestAttemptDeadlineReachesTheServer(t *testing.T) {
	s := &deadlineStub{}
	addr := serve(t, func(g *grpc.Server) { rocketryv1.RegisterMessagingServiceServer(g, s) })

	p := newTestProducer(t, addr, WithAttemptTimeout(2*time.Second))
	_, err := p.Send(context.Background(), msg("t"))
	require.NoError(t, err)
	left := time.Duration(s.left.Load())
	assert.True(t, left > time.Second && left <= 2*time.Second, "Producer: server saw %v left; want the 2 s attempt timeout", left)

	cc := dialWith(t, addr, UnaryClientInterceptor(WithAttemptTimeout(1500*time.Millisecond)))
	_, err = rocketryv1.NewMessagingServiceClient(cc).SendMessage(context.Background(), sendReq("x", false))
	require.NoError(t, err)
	left = time.Duration(s.left.Load())
	assert.True(t, left > time.Second && left <= 1500*time.Millisecond, "interceptor: server saw %v left; want the 1.5 s attempt timeout", left)
}

// TestSizeLimitIsPermanent: gRPC's own RESOURCE_EXHAUSTED for a message
// over a server's receive limit is not a throttle: one attempt, not
// IsThrottled, MESSAGE_TOO_LARGE. Regression: it was retried as a 530.
func TestSizeLimitIsPermanent(t *testing.T) {
	t.Parallel()
	s := &stub{}
	addr := serve(t, func(g *grpc.Server) { rocketryv1.RegisterMessagingServiceServer(g, s) }) // default 4 MiB receive limit
	p := newTestProducer(t, addr, WithMaxBodyBytes(8<<20), WithThrottleSchedule(backoff.Immediate))
	m := msg("t")
	m.Body = make([]byte, 4<<20)
	_, err := p.Send(context.Background(), m)
	var se *SendError
	require.ErrorAs(t, err, &se)
	assert.ErrorIs(t, err, ErrNotRetryable)
	assert.Equal(t, 1, se.Attempts)
	assert.Equal(t, Permanent, se.Last)
	assert.Equal(t, brokercode.MessageTooLarge, se.Code)
	assert.False(t, IsThrottled(err), "IsThrottled(%v)", err)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))

	// The interceptor refuses a request over the call's send limit before
	// any attempt.
	calls := s.count()
	cc := dialWith(t, addr, UnaryClientInterceptor())
	req := sendReq("x", false)
	req.Messages[0].Body = make([]byte, 1<<20)
	_, err = rocketryv1.NewMessagingServiceClient(cc).SendMessage(context.Background(), req, grpc.MaxCallSendMsgSize(1<<19))
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 0, se.Attempts)
	assert.ErrorIs(t, err, ErrNotRetryable)
	assert.False(t, IsThrottled(err))
	assert.Equal(t, calls, s.count(), "no call reached the server")
}

// TestPolicySetsAttempts: a delivery policy of N retries makes N+1 attempts
// unless WithMaxAttempts is given. Regression: the default 3 attempts cut
// the policy silently.
func TestPolicySetsAttempts(t *testing.T) {
	t.Parallel()
	pol, err := backoff.Preset("aws-managed")
	require.NoError(t, err)
	c, err := build(scopeNew, "New", []Option{WithDeliveryPolicy(pol)})
	require.NoError(t, err)
	assert.Equal(t, pol.Retries()+1, c.MaxAttempts)
	c, err = build(scopeNew, "New", []Option{WithDeliveryPolicy(pol), WithMaxAttempts(4)})
	require.NoError(t, err)
	assert.Equal(t, 4, c.MaxAttempts, "WithMaxAttempts wins, in either order")
	c, err = build(scopeNew, "New", []Option{WithMaxAttempts(4), WithDeliveryPolicy(pol)})
	require.NoError(t, err)
	assert.Equal(t, 4, c.MaxAttempts)
	c, err = build(scopeNew, "New", nil)
	require.NoError(t, err)
	assert.Equal(t, DefaultMaxAttempts, c.MaxAttempts, "an unbounded schedule keeps the default")
}

// TestCancelledContextAgrees: Send and SendAsync both refuse an ended
// context with its error, without an attempt and without the fallback.
// Regression: Send made an attempt and dead-lettered the message.
func TestCancelledContextAgrees(t *testing.T) {
	t.Parallel()
	s := &stub{}
	addr := startStub(t, s)
	var fell atomic.Int32
	p := newTestProducer(t, addr, WithFallback(func(*Message, error) { fell.Add(1) }))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.Send(ctx, msg("t"))
	assert.ErrorIs(t, err, context.Canceled)
	err = p.SendAsync(ctx, msg("t"), func(*SendReceipt, error) { t.Error("callback of a refused send") })
	assert.ErrorIs(t, err, context.Canceled)
	err = p.TrySendAsync(ctx, msg("t"), func(*SendReceipt, error) { t.Error("callback of a refused send") })
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 0, s.count())
	assert.Equal(t, int32(0), fell.Load())
}

// TestCloseFromCallbackReturns: Close called from a callback (or a
// fallback) returns when its context ends. Regression: it waited forever
// for the send whose callback called it.
func TestCloseFromCallbackReturns(t *testing.T) {
	s := &stub{}
	addr := startStub(t, s)
	p, err := New(addr, WithProtocol(RocketryV1))
	require.NoError(t, err)
	closed := make(chan error, 1)
	require.NoError(t, p.SendAsync(context.Background(), msg("t"), func(*SendReceipt, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		closed <- p.Close(ctx)
	}))
	select {
	case err := <-closed:
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(10 * time.Second):
		t.Fatal("Close called from a callback did not return when its context ended")
	}
	_, err = p.Send(context.Background(), msg("t"))
	assert.ErrorIs(t, err, ErrClosed)
	// The worker ends once the callback returns (the leak check in
	// TestMain sees it).
	require.Eventually(t, func() bool { return p.async.workers.Load() == 0 }, 5*time.Second, time.Millisecond)
}

// TestFallbackClose: a fallback calling Close with a short context returns
// too.
func TestFallbackClose(t *testing.T) {
	s := &stub{script: []error{err400}}
	addr := startStub(t, s)
	var p *Producer
	closed := make(chan error, 1)
	p, err := New(addr, WithProtocol(RocketryV1), WithFallback(func(*Message, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		closed <- p.Close(ctx)
	}))
	require.NoError(t, err)
	_, err = p.Send(context.Background(), msg("t"))
	assert.ErrorIs(t, err, ErrNotRetryable)
	assert.ErrorIs(t, <-closed, context.DeadlineExceeded)
}

// bodyStatus is a reply whose status is in the body, as in RocketMQ 5.
type bodyClassifier struct{}

func (bodyClassifier) Classify(reply any, err error) Outcome {
	if err != nil {
		return classifyError(err)
	}
	r := reply.(*rocketryv1.SendMessageResponse)
	if len(r.GetResults()) > 0 && strings.HasPrefix(r.GetResults()[0].GetMessageId(), "busy") {
		return Outcome{Kind: Throttled, Code: brokercode.TooManyRequests, Err: errors.New("busy")}
	}
	return Outcome{Kind: Stored}
}

type busyStub struct {
	rocketryv1.UnimplementedMessagingServiceServer
	calls atomic.Int32
}

// SendMessage answers OK with a "busy" body twice, then stores.
func (s *busyStub) SendMessage(_ context.Context, req *rocketryv1.SendMessageRequest) (*rocketryv1.SendMessageResponse, error) {
	id := "ok"
	if s.calls.Add(1) <= 2 {
		id = "busy"
	}
	return &rocketryv1.SendMessageResponse{Results: []*rocketryv1.SendResult{{MessageId: id}}}, nil
}

// TestInterceptorClassifier: a service whose status is in the response body
// is retried by the same rules through WithClassifier.
func TestInterceptorClassifier(t *testing.T) {
	t.Parallel()
	s := &busyStub{}
	addr := serve(t, func(g *grpc.Server) { rocketryv1.RegisterMessagingServiceServer(g, s) })
	rec := &recorder{}
	ic, err := NewUnaryClientInterceptor(WithClassifier(bodyClassifier{}), WithThrottleSchedule(msSchedule(t)), WithRand(nil), WithObserver(rec.observe))
	require.NoError(t, err)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(ic))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	r, err := rocketryv1.NewMessagingServiceClient(cc).SendMessage(context.Background(), sendReq("x", false))
	require.NoError(t, err)
	assert.Equal(t, "ok", r.GetResults()[0].GetMessageId())
	assert.Equal(t, int32(3), s.calls.Load())
	var whys []OutcomeKind
	for _, e := range rec.retries() {
		whys = append(whys, e.Why)
	}
	assert.Equal(t, []OutcomeKind{Throttled, Throttled}, whys)
}
