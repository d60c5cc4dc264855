package producer_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/producer"
	"github.com/rocketry-go/rocketry/producer/deadletter"
)

// Bad input (issue 7): every invalid option and message gets a clear error
// naming what is wrong, none panics, and none makes a network call. Calls
// are counted twice: by a grpc.ClientConnInterface that counts every Invoke
// (NewFromConn), and by a real broker's SendRequests (New).

// countingConn is a connection that counts calls and makes none.
type countingConn struct{ calls atomic.Int32 }

func (c *countingConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	c.calls.Add(1)
	return status.Error(codes.Unavailable, "countingConn: no network here")
}

func (c *countingConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	c.calls.Add(1)
	return nil, status.Error(codes.Unavailable, "countingConn: no network here")
}

// noPanic runs f and reports a panic as an error.
func noPanic(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}

// checkClear checks that err is one line, starts with "producer: " and
// names want.
func checkClear(t *testing.T, call string, err error, want string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s = nil error; want one naming %q", call, want)
	case strings.HasPrefix(err.Error(), "panic: "):
		t.Errorf("%s %v; want an error naming %q", call, err, want)
	case !strings.HasPrefix(err.Error(), "producer: ") || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), want):
		t.Errorf("%s = %q; want one line starting with \"producer: \" naming %q", call, err, want)
	}
}

func TestBadOptions(t *testing.T) {
	b := brokertest.Start(t)
	cc := &countingConn{}
	store, err := deadletter.Open(filepath.Join(t.TempDir(), "dead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	fallback := func(*producer.Message, error) {}
	tests := []struct {
		name string
		opts []producer.Option
		want string // what the error must name
	}{
		{"zero attempts", []producer.Option{producer.WithMaxAttempts(0)}, "WithMaxAttempts(0)"},
		{"negative attempts", []producer.Option{producer.WithMaxAttempts(-3)}, "WithMaxAttempts(-3)"},
		{"min int attempts", []producer.Option{producer.WithMaxAttempts(math.MinInt)}, "WithMaxAttempts"},
		{"zero attempt timeout", []producer.Option{producer.WithAttemptTimeout(0)}, "WithAttemptTimeout(0s)"},
		{"negative attempt timeout", []producer.Option{producer.WithAttemptTimeout(-1)}, "WithAttemptTimeout(-1ns)"},
		{"nil throttle schedule", []producer.Option{producer.WithThrottleSchedule(nil)}, "WithThrottleSchedule(nil)"},
		{"nil failure schedule", []producer.Option{producer.WithFailureSchedule(nil)}, "WithFailureSchedule(nil)"},
		{"zero rate", []producer.Option{producer.WithRateLimit(0, 1)}, "WithRateLimit(0, 1)"},
		{"negative rate", []producer.Option{producer.WithRateLimit(-5, 1)}, "WithRateLimit(-5, 1)"},
		{"NaN rate", []producer.Option{producer.WithRateLimit(math.NaN(), 1)}, "WithRateLimit(NaN, 1)"},
		{"infinite rate", []producer.Option{producer.WithRateLimit(math.Inf(1), 1)}, "WithRateLimit(+Inf, 1)"},
		{"zero burst", []producer.Option{producer.WithRateLimit(10, 0)}, "WithRateLimit(10, 0)"},
		{"zero in flight", []producer.Option{producer.WithMaxInFlight(0)}, "WithMaxInFlight(0)"},
		{"negative in flight", []producer.Option{producer.WithMaxInFlight(-1)}, "WithMaxInFlight(-1)"},
		{"nil fallback", []producer.Option{producer.WithFallback(nil)}, "WithFallback(nil)"},
		{"zero budget", []producer.Option{producer.WithRetryBudget(0, 0.1)}, "WithRetryBudget(0, 0.1)"},
		{"budget over 1000", []producer.Option{producer.WithRetryBudget(1001, 0.1)}, "WithRetryBudget(1001, 0.1)"},
		{"NaN budget", []producer.Option{producer.WithRetryBudget(math.NaN(), 0.1)}, "WithRetryBudget(NaN, 0.1)"},
		{"zero budget ratio", []producer.Option{producer.WithRetryBudget(10, 0)}, "WithRetryBudget(10, 0)"},
		{"budget ratio over 1", []producer.Option{producer.WithRetryBudget(10, 1.5)}, "WithRetryBudget(10, 1.5)"},
		{"negative body limit", []producer.Option{producer.WithMaxBodyBytes(-1)}, "WithMaxBodyBytes(-1)"},
		{"nil logger", []producer.Option{producer.WithLogger(nil)}, "WithLogger(nil)"},
		{"nil delivery policy", []producer.Option{producer.WithDeliveryPolicy(nil)}, "WithDeliveryPolicy(nil)"},
		{"nil dead-letter sink", []producer.Option{producer.WithDeadLetterSink(nil)}, "WithDeadLetterSink(nil)"},
		{"fallback and store", []producer.Option{producer.WithFallback(fallback), producer.WithDeadLetterSink(store)}, "excludes WithFallback"},
		{"body limit over the store's", []producer.Option{producer.WithDeadLetterSink(store), producer.WithMaxBodyBytes(deadletter.MaxBodyBytes + 1)}, "WithMaxBodyBytes(1073741825): over the dead-letter sink's limit"},
		{"second of two bad options", []producer.Option{producer.WithMaxAttempts(2), producer.WithMaxInFlight(0)}, "WithMaxInFlight(0)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := noPanic(func() error {
				p, err := producer.New(b.Addr(), tt.opts...)
				if err == nil {
					p.Close(context.Background())
				}
				return err
			})
			checkClear(t, fmt.Sprintf("New(%s)", tt.name), err, tt.want)
			err = noPanic(func() error {
				p, err := producer.NewFromConn(cc, tt.opts...)
				if err == nil {
					p.Close(context.Background())
				}
				return err
			})
			checkClear(t, fmt.Sprintf("NewFromConn(%s)", tt.name), err, tt.want)
		})
	}
	if got := cc.calls.Load(); got != 0 {
		t.Errorf("calls on the connection given to NewFromConn = %d; want 0", got)
	}
	if got := b.Stats().GetSendRequests(); got != 0 {
		t.Errorf("broker SendRequests = %d; want 0", got)
	}
}

func TestBadTargets(t *testing.T) {
	for _, target := range []string{"", "   ", "localhost", "127.0.0.1", "a:1,,b:2", "a:1, ", ",", "a:1,b", "[::1", "host:port:extra"} {
		err := noPanic(func() error {
			p, err := producer.New(target)
			if err == nil {
				p.Close(context.Background())
			}
			return err
		})
		checkClear(t, fmt.Sprintf("New(%q)", target), err, "New(")
	}
	err := noPanic(func() error {
		_, err := producer.NewFromConn(nil)
		return err
	})
	checkClear(t, "NewFromConn(nil)", err, "NewFromConn(nil)")
}

// TestBadScopes: an option used where it does not apply is refused, naming
// it, before any attempt.
func TestBadScopes(t *testing.T) {
	var invoked atomic.Int32
	invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		invoked.Add(1)
		return nil
	}
	call := func(ic grpc.UnaryClientInterceptor, copts ...grpc.CallOption) error {
		return noPanic(func() error {
			return ic(context.Background(), "/rocketry.v1.MessagingService/SendMessage", &rocketryv1.SendMessageRequest{}, &rocketryv1.SendMessageResponse{}, nil, invoker, copts...)
		})
	}
	tests := []struct {
		name  string
		ic    grpc.UnaryClientInterceptor
		copts []grpc.CallOption
		want  string
	}{
		{"WithRateLimit per call", producer.UnaryClientInterceptor(), []grpc.CallOption{producer.WithCallOptions(producer.WithRateLimit(1, 1))}, "WithRateLimit does not apply to WithCallOptions"},
		{"WithRetryBudget per call", producer.UnaryClientInterceptor(), []grpc.CallOption{producer.WithCallOptions(producer.WithRetryBudget(10, 0.1))}, "WithRetryBudget does not apply to WithCallOptions"},
		{"invalid option per call", producer.UnaryClientInterceptor(), []grpc.CallOption{producer.WithCallOptions(producer.WithAttemptTimeout(-1))}, "WithAttemptTimeout(-1ns)"},
	}
	for _, tt := range tests {
		checkClear(t, tt.name, call(tt.ic, tt.copts...), tt.want)
	}
	// Options of the interceptor itself are refused when it is built.
	for _, tt := range []struct {
		name string
		opt  producer.Option
		want string
	}{
		{"WithMaxInFlight in the interceptor", producer.WithMaxInFlight(8), "WithMaxInFlight does not apply to UnaryClientInterceptor"},
		{"WithDeadLetterSink in the interceptor", producer.WithDeadLetterSink(producer.FallbackFunc(func(*producer.Message, error) {})), "WithDeadLetterSink does not apply to UnaryClientInterceptor"},
		{"WithFallback in the interceptor", producer.WithFallback(func(*producer.Message, error) {}), "WithFallback does not apply"},
		{"invalid option in the interceptor", producer.WithMaxAttempts(0), "WithMaxAttempts(0)"},
	} {
		_, err := producer.NewUnaryClientInterceptor(tt.opt)
		checkClear(t, tt.name, err, tt.want)
	}
	// NewFromConn's connection is already dialled.
	_, err := producer.NewFromConn(&countingConn{}, producer.WithDialOptions())
	checkClear(t, "WithDialOptions in NewFromConn", err, "WithDialOptions does not apply to NewFromConn")
	if got := invoked.Load(); got != 0 {
		t.Errorf("invoker called %d times; want 0", got)
	}
}

// TestBadMessages: an invalid message is refused by Send, SendAsync and
// TrySendAsync with ErrInvalidMessage naming the field, before any call,
// and is not handed to the fallback.
func TestBadMessages(t *testing.T) {
	b := brokertest.Start(t)
	cc := &countingConn{}
	var fellBack atomic.Int32
	opts := []producer.Option{producer.WithMaxBodyBytes(16), producer.WithFallback(func(*producer.Message, error) { fellBack.Add(1) })}
	viaBroker, err := producer.New(b.Addr(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer viaBroker.Close(context.Background())
	viaConn, err := producer.NewFromConn(cc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer viaConn.Close(context.Background())

	tests := []struct {
		name string
		m    *producer.Message
		want string
	}{
		{"nil", nil, "message is nil"},
		{"empty topic", &producer.Message{Body: []byte("x")}, "topic is empty"},
		{"topic not UTF-8", &producer.Message{Topic: "t\xff", Body: []byte("x")}, "topic is not valid UTF-8"},
		{"body over the limit", &producer.Message{Topic: "t", Body: make([]byte, 17)}, "body is 17 bytes, over the limit of 16"},
		{"id not UTF-8", &producer.Message{ID: "\xc3(", Topic: "t"}, "id is not valid UTF-8"},
		{"tag not UTF-8", &producer.Message{Topic: "t", Tag: "\xff"}, "tag is not valid UTF-8"},
		{"key not UTF-8", &producer.Message{Topic: "t", Keys: []string{"ok", "\xfe"}}, "key 1 is not valid UTF-8"},
		{"property name not UTF-8", &producer.Message{Topic: "t", Properties: map[string]string{"\xff": "v"}}, "is not valid UTF-8"},
		{"property value not UTF-8", &producer.Message{Topic: "t", Properties: map[string]string{"p": "\xff"}}, `property "p" is not valid UTF-8`},
	}
	for _, tt := range tests {
		for _, p := range []struct {
			name string
			p    *producer.Producer
		}{{"New", viaBroker}, {"NewFromConn", viaConn}} {
			_, err := noPanicSend(func() (*producer.SendReceipt, error) { return p.p.Send(context.Background(), tt.m) })
			checkInvalid(t, fmt.Sprintf("%s: Send(%s)", p.name, tt.name), err, tt.want)
			err = noPanic(func() error {
				return p.p.SendAsync(context.Background(), tt.m, func(*producer.SendReceipt, error) { t.Errorf("callback of %s ran", tt.name) })
			})
			checkInvalid(t, fmt.Sprintf("%s: SendAsync(%s)", p.name, tt.name), err, tt.want)
			err = noPanic(func() error {
				return p.p.TrySendAsync(context.Background(), tt.m, func(*producer.SendReceipt, error) { t.Errorf("callback of %s ran", tt.name) })
			})
			checkInvalid(t, fmt.Sprintf("%s: TrySendAsync(%s)", p.name, tt.name), err, tt.want)
		}
	}
	if got := cc.calls.Load(); got != 0 {
		t.Errorf("calls on the connection given to NewFromConn = %d; want 0", got)
	}
	if got := b.Stats().GetSendRequests(); got != 0 {
		t.Errorf("broker SendRequests = %d; want 0", got)
	}
	if got := fellBack.Load(); got != 0 {
		t.Errorf("fallback calls = %d; want 0 (an invalid message is the caller's to fix)", got)
	}
}

func noPanicSend(f func() (*producer.SendReceipt, error)) (r *producer.SendReceipt, err error) {
	err = noPanic(func() error {
		var e error
		r, e = f()
		return e
	})
	return r, err
}

func checkInvalid(t *testing.T, call string, err error, want string) {
	t.Helper()
	checkClear(t, call, err, want)
	if err != nil && !errors.Is(err, producer.ErrInvalidMessage) {
		t.Errorf("%s = %v; want ErrInvalidMessage", call, err)
	}
}

// TestInvalidUTF8TagNotRetriedNorLostWithSpool: a message whose tag, key or
// property was not UTF-8 passed validation; gRPC then refused to marshal it
// (INTERNAL, no network call), the producer retried it MaxAttempts times,
// and the spool could not encode it either, so it was neither sent nor
// spooled ("spool failed; message not kept"). It must be refused up front.
func TestInvalidUTF8TagNotRetriedNorLostWithSpool(t *testing.T) {
	b := brokertest.Start(t)
	store, err := deadletter.Open(filepath.Join(t.TempDir(), "dead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	p, err := producer.New(b.Addr(), producer.WithDeadLetterSink(store))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	for _, m := range []*producer.Message{
		{Topic: "t", Tag: "\xff"},
		{Topic: "t", Keys: []string{"\xff"}},
		{Topic: "t", Properties: map[string]string{"k": "\xff"}},
	} {
		if _, err := p.Send(context.Background(), m); !errors.Is(err, producer.ErrInvalidMessage) {
			t.Errorf("Send(%+v) = %v; want ErrInvalidMessage", m, err)
		}
	}
	if got := b.Stats().GetSendRequests(); got != 0 {
		t.Errorf("broker SendRequests = %d; want 0", got)
	}
}
