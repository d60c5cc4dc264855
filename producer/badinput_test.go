package producer_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/broker/brokertest"
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

func TestBadTargets(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ target, want string }{
		{"", `New(""): target is empty`},
		{"   ", "New("},
		{"localhost", `endpoint "localhost" is not host:port`},
		{"127.0.0.1", "New("},
		{"a:1,,b:2", `endpoint "" is not host:port`},
		{"a:1, ", "New("},
		{",", "New("},
		{"a:1,b", "New("},
		{"[::1", "New("},
		{"host:port:extra", "New("},
	} {
		err := noPanic(func() error {
			p, err := producer.New(tt.target, producer.WithProtocol(producer.RocketryV1))
			if err == nil {
				p.Close(context.Background())
			}
			return err
		})
		checkClear(t, fmt.Sprintf("New(%q)", tt.target), err, tt.want)
	}
	err := noPanic(func() error {
		_, err := producer.NewFromConn(nil)
		return err
	})
	checkClear(t, "NewFromConn(nil)", err, "NewFromConn(nil)")
}

// TestBadMessages: an invalid message is refused by Send, SendAsync and
// TrySendAsync with ErrInvalidMessage naming the field, before any call,
// and is not handed to the fallback.
func TestBadMessages(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t)
	cc := &countingConn{}
	var fellBack atomic.Int32
	opts := []producer.Option{producer.WithMaxBodyBytes(16), producer.WithFallback(func(*producer.Message, error) { fellBack.Add(1) })}
	viaBroker, err := producer.New(b.Addr(), append([]producer.Option{producer.WithProtocol(producer.RocketryV1)}, opts...)...)
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
	t.Parallel()
	b := brokertest.Start(t)
	store, err := deadletter.Open(filepath.Join(t.TempDir(), "dead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	p, err := producer.New(b.Addr(), producer.WithProtocol(producer.RocketryV1), producer.WithDeadLetterSink(store))
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
