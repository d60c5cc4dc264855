package producer

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/broker"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// brokerErr is a status as the broker makes it: a gRPC code, an ErrorDetail
// and, when hint > 0, a RetryInfo.
func brokerErr(gc codes.Code, code rocketryv1.Code, reason rocketryv1.ThrottleReason, hint time.Duration) error {
	return broker.StatusError(gc, code, reason, hint, "test: "+code.String())
}

var (
	err530       = brokerErr(codes.ResourceExhausted, rocketryv1.Code_CODE_TOO_MANY_REQUESTS, rocketryv1.ThrottleReason_THROTTLE_REASON_BACKLOG, 0)
	err500       = brokerErr(codes.Internal, rocketryv1.Code_CODE_INTERNAL_ERROR, 0, 0)
	err503       = brokerErr(codes.Unavailable, rocketryv1.Code_CODE_UNAVAILABLE, 0, 0)
	err400       = brokerErr(codes.InvalidArgument, rocketryv1.Code_CODE_BAD_REQUEST, 0, 0)
	errBlackhole = errors.New("test: never answer")
)

// stub is a MessagingService with a script: call i gets script[i] (nil:
// stored; errBlackhole: no answer until the call's context ends); calls
// past the script are stored.
type stub struct {
	rocketryv1.UnimplementedMessagingServiceServer
	mu     sync.Mutex
	script []error
	calls  int
	ids    []string

	latency time.Duration // before every answer
	noStore bool          // do not keep IDs (memory measurements)
	// clock, when set, is read at every call into at.
	clock func() time.Time
	at    []time.Time
}

func (s *stub) SendMessage(ctx context.Context, req *rocketryv1.SendMessageRequest) (*rocketryv1.SendMessageResponse, error) {
	s.mu.Lock()
	i := s.calls
	s.calls++
	if s.clock != nil {
		s.at = append(s.at, s.clock())
	}
	s.mu.Unlock()
	var err error
	if i < len(s.script) {
		err = s.script[i]
	}
	if s.latency > 0 {
		t := time.NewTimer(s.latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	switch {
	case err == errBlackhole:
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	case err != nil:
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &rocketryv1.SendMessageResponse{}
	for _, m := range req.GetMessages() {
		if s.noStore {
			out.Results = append(out.Results, &rocketryv1.SendResult{MessageId: m.GetMessageId()})
			continue
		}
		s.ids = append(s.ids, m.GetMessageId())
		out.Results = append(out.Results, &rocketryv1.SendResult{MessageId: m.GetMessageId(), Offset: int64(len(s.ids) - 1)})
	}
	return out, nil
}

func (s *stub) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// startStub serves s on 127.0.0.1:0 until the test ends.
func startStub(t testing.TB, s *stub) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rocketryv1.RegisterMessagingServiceServer(srv, s)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// newProducer makes a producer that is closed when the test ends.
func newTestProducer(t testing.TB, target string, opts ...Option) *Producer {
	t.Helper()
	p, err := New(target, append([]Option{WithProtocol(RocketryV1)}, opts...)...)
	if err != nil {
		t.Fatalf("New(%q, WithProtocol(RocketryV1)) = %v", target, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return p
}

// recorder keeps every event.
type recorder struct {
	mu sync.Mutex
	ev []Event
}

func (r *recorder) observe(e Event) {
	r.mu.Lock()
	r.ev = append(r.ev, e)
	r.mu.Unlock()
}

func (r *recorder) events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.ev...)
}

// kinds is the events' kinds, space separated, for messages of id (all when
// id is empty).
func (r *recorder) kinds(id string) string {
	var out []string
	for _, e := range r.events() {
		if id == "" || e.MessageID == id {
			out = append(out, e.Kind.String())
		}
	}
	return strings.Join(out, " ")
}

// retries is the (Why, Delay) of every EventRetry.
func (r *recorder) retries() []Event {
	var out []Event
	for _, e := range r.events() {
		if e.Kind == EventRetry {
			out = append(out, e)
		}
	}
	return out
}

// msSchedule is a millisecond connection backoff: 2, 4, 8, ... ms (no
// jitter with WithRand(nil)), at least 1 s per attempt after a wait.
func msSchedule(t testing.TB) *backoff.Connection {
	t.Helper()
	c, err := backoff.NewConnection(backoff.Config{BaseDelay: 2 * time.Millisecond, Multiplier: 2, Jitter: 0.2, MaxDelay: 50 * time.Millisecond, MinConnectTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func msg(topic string) *Message {
	return &Message{Topic: topic, Body: []byte("hello")}
}

// memSink is a DeadLetterSink in memory, for the producer's own tests; the durable store has its own
// (producer/deadletter).
type memSink struct {
	mu   sync.Mutex
	recs map[string]*DeadLetter
	puts int
}

func newMemSink() *memSink { return &memSink{recs: map[string]*DeadLetter{}} }

func (s *memSink) Put(d *DeadLetter) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs[d.Message.ID] = d
	s.puts++
	return nil
}

func (s *memSink) get(id string) *DeadLetter {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recs[id]
}

func (s *memSink) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs)
}

// limitedSink is a sink with a body limit.
type limitedSink struct {
	*memSink
	limit int
}

func (s limitedSink) MaxBodyBytes() int { return s.limit }
