package broker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// client is a real gRPC client of a broker.
type client struct {
	conn *grpc.ClientConn
	rocketryv1.MessagingServiceClient
	rocketryv1.ConsumerServiceClient
}

func dial(t testing.TB, addr string) *client {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient(%q) = %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &client{conn, rocketryv1.NewMessagingServiceClient(conn), rocketryv1.NewConsumerServiceClient(conn)}
}

// start starts a broker and a client of it.
func start(t testing.TB, opts ...broker.Option) (*broker.Broker, *client) {
	t.Helper()
	b := brokertest.Start(t, opts...)
	return b, dial(t, b.Addr())
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func msg(topic, id string) *rocketryv1.Message {
	return &rocketryv1.Message{Topic: topic, MessageId: id, Body: []byte("body of " + id)}
}

// msgs makes n messages of topic with ids prefix-0 ... prefix-(n-1).
func msgs(topic, prefix string, n int) []*rocketryv1.Message {
	out := make([]*rocketryv1.Message, n)
	for i := range out {
		out[i] = msg(topic, fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

func send(t testing.TB, c *client, ms ...*rocketryv1.Message) (*rocketryv1.SendMessageResponse, error) {
	t.Helper()
	return c.SendMessage(ctx(t), &rocketryv1.SendMessageRequest{Messages: ms})
}

func mustSend(t testing.TB, c *client, ms ...*rocketryv1.Message) *rocketryv1.SendMessageResponse {
	t.Helper()
	resp, err := send(t, c, ms...)
	if err != nil {
		t.Fatalf("SendMessage(%d messages) = %v; want success", len(ms), err)
	}
	return resp
}

// fill stores n messages in batches of up to 100.
func fill(t testing.TB, c *client, topic, prefix string, n int) {
	t.Helper()
	all := msgs(topic, prefix, n)
	for len(all) > 0 {
		k := min(100, len(all))
		mustSend(t, c, all[:k]...)
		all = all[k:]
	}
}

func receive(t testing.TB, c *client, topic, group string, n int32) []*rocketryv1.ReceivedMessage {
	t.Helper()
	resp, err := c.ReceiveMessages(ctx(t), &rocketryv1.ReceiveMessagesRequest{Topic: topic, Group: group, MaxMessages: n, AutoCommit: true})
	if err != nil {
		t.Fatalf("ReceiveMessages(%q, %q, %d) = %v; want success", topic, group, n, err)
	}
	return resp.Messages
}

// detail returns err's status and ErrorDetail; it fails t when err has no
// ErrorDetail.
func detail(t testing.TB, err error) (*status.Status, *rocketryv1.ErrorDetail) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("error %v is not a gRPC status", err)
	}
	for _, d := range st.Details() {
		if ed, ok := d.(*rocketryv1.ErrorDetail); ok {
			return st, ed
		}
	}
	t.Fatalf("status %v has no ErrorDetail (details %v)", st, st.Details())
	return nil, nil
}

// wantRefusal checks that err is a status with gRPC code gc and an
// ErrorDetail with code and reason.
func wantRefusal(t testing.TB, err error, gc codes.Code, code rocketryv1.Code, reason rocketryv1.ThrottleReason) *status.Status {
	t.Helper()
	if err == nil {
		t.Fatalf("call succeeded; want %v (%v %v)", gc, code, reason)
	}
	st, d := detail(t, err)
	if st.Code() != gc || d.Code != code || d.Reason != reason || d.Message == "" {
		t.Fatalf("error = %v %v %v %q; want %v %v %v with a message", st.Code(), d.Code, d.Reason, d.Message, gc, code, reason)
	}
	return st
}

func retryDelay(st *status.Status) (time.Duration, bool) {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.RetryDelay.AsDuration(), true
		}
	}
	return 0, false
}

// fakeClock is a clock for WithClock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

var _ = errors.Is
