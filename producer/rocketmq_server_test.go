package producer

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/apache/rocketmq/v2"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// rmqServer is a test double of the remote side of apache.rocketmq.v2: a
// real gRPC server on 127.0.0.1:0 that records every call's metadata and
// every request, answers QueryRoute from its routes, SendMessage from
// answer, and Telemetry with settings (or not at all when settings is nil).
type rmqServer struct {
	rocketmqv2.UnimplementedMessagingServiceServer
	addr string
	srv  *grpc.Server

	mu sync.Mutex
	// What the test sets (under mu).
	routes   map[string][]*rocketmqv2.MessageQueue
	settings *rocketmqv2.Settings // the server's answer on Telemetry; nil: none
	answer   func(*rocketmqv2.SendMessageRequest) *rocketmqv2.SendMessageResponse
	push     []*rocketmqv2.TelemetryCommand // written after Settings on each stream
	// What the server saw.
	calls      []rmqSeenCall
	sends      []*rocketmqv2.SendMessageRequest
	queries    []*rocketmqv2.QueryRouteRequest
	heartbeats []*rocketmqv2.HeartbeatRequest
	notifies   int
	clientCmds []*rocketmqv2.TelemetryCommand // every command a client wrote
	streams    []chan struct{}                // open Telemetry streams; close one to end it
}

type rmqSeenCall struct {
	method string
	md     metadata.MD
}

// startRMQServer starts a server stopped at the test's end (or earlier with
// stop).
func startRMQServer(t *testing.T) *rmqServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &rmqServer{addr: lis.Addr().String(), routes: map[string][]*rocketmqv2.MessageQueue{}}
	s.srv = grpc.NewServer(
		grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			s.see(ctx, info.FullMethod)
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			s.see(ss.Context(), info.FullMethod)
			return h(srv, ss)
		}),
	)
	rocketmqv2.RegisterMessagingServiceServer(s.srv, s)
	go func() { _ = s.srv.Serve(lis) }()
	t.Cleanup(s.stop)
	return s
}

func (s *rmqServer) stop() { s.srv.Stop() }

func (s *rmqServer) see(ctx context.Context, method string) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	s.calls = append(s.calls, rmqSeenCall{method, md.Copy()})
	s.mu.Unlock()
}

// hostPort splits the server's address for a route.
func (s *rmqServer) hostPort(t *testing.T) (string, int32) {
	h, p, err := net.SplitHostPort(s.addr)
	require.NoError(t, err)
	n, err := strconv.Atoi(p)
	require.NoError(t, err)
	return h, int32(n)
}

// rmqQueueOn is a writable queue id of broker name, served at srv.
func rmqQueueOn(t *testing.T, srv *rmqServer, topic, name string, id int32) *rocketmqv2.MessageQueue {
	h, p := srv.hostPort(t)
	return &rocketmqv2.MessageQueue{
		Topic:      &rocketmqv2.Resource{Name: topic},
		Id:         id,
		Permission: rocketmqv2.Permission_READ_WRITE,
		Broker: &rocketmqv2.Broker{Name: name, Endpoints: &rocketmqv2.Endpoints{
			Scheme: rocketmqv2.AddressScheme_IPv4, Addresses: []*rocketmqv2.Address{{Host: h, Port: p}},
		}},
		AcceptMessageTypes: []rocketmqv2.MessageType{rocketmqv2.MessageType_NORMAL, rocketmqv2.MessageType_TRANSACTION},
	}
}

func (s *rmqServer) setRoute(topic string, mqs ...*rocketmqv2.MessageQueue) {
	s.mu.Lock()
	s.routes[topic] = mqs
	s.mu.Unlock()
}

func (s *rmqServer) setSettings(st *rocketmqv2.Settings) {
	s.mu.Lock()
	s.settings = st
	s.mu.Unlock()
}

func (s *rmqServer) setAnswer(f func(*rocketmqv2.SendMessageRequest) *rocketmqv2.SendMessageResponse) {
	s.mu.Lock()
	s.answer = f
	s.mu.Unlock()
}

// endStreams ends every open Telemetry stream.
func (s *rmqServer) endStreams() {
	s.mu.Lock()
	for _, c := range s.streams {
		close(c)
	}
	s.streams = nil
	s.mu.Unlock()
}

// seen returns a snapshot of what the server saw, under its lock.
func (s *rmqServer) seen(f func(s *rmqServer)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// clientSettings returns the Settings the clients wrote.
func (s *rmqServer) clientSettings() []*rocketmqv2.Settings {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*rocketmqv2.Settings
	for _, c := range s.clientCmds {
		if st := c.GetSettings(); st != nil {
			out = append(out, st)
		}
	}
	return out
}

func (s *rmqServer) QueryRoute(_ context.Context, req *rocketmqv2.QueryRouteRequest) (*rocketmqv2.QueryRouteResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queries = append(s.queries, req)
	mqs, ok := s.routes[req.GetTopic().GetName()]
	if !ok {
		return &rocketmqv2.QueryRouteResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_TOPIC_NOT_FOUND, Message: "no such topic"}}, nil
	}
	return &rocketmqv2.QueryRouteResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_OK}, MessageQueues: mqs}, nil
}

func (s *rmqServer) Heartbeat(_ context.Context, req *rocketmqv2.HeartbeatRequest) (*rocketmqv2.HeartbeatResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heartbeats = append(s.heartbeats, req)
	return &rocketmqv2.HeartbeatResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_OK}}, nil
}

func (s *rmqServer) SendMessage(_ context.Context, req *rocketmqv2.SendMessageRequest) (*rocketmqv2.SendMessageResponse, error) {
	s.mu.Lock()
	s.sends = append(s.sends, proto.Clone(req).(*rocketmqv2.SendMessageRequest))
	answer := s.answer
	s.mu.Unlock()
	if answer != nil {
		return answer(req), nil
	}
	resp := &rocketmqv2.SendMessageResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_OK}}
	for i, m := range req.GetMessages() {
		resp.Entries = append(resp.Entries, &rocketmqv2.SendResultEntry{
			Status:    &rocketmqv2.Status{Code: rocketmqv2.Code_OK},
			MessageId: m.GetSystemProperties().GetMessageId(),
			Offset:    int64(100 + i),
		})
	}
	return resp, nil
}

func (s *rmqServer) NotifyClientTermination(context.Context, *rocketmqv2.NotifyClientTerminationRequest) (*rocketmqv2.NotifyClientTerminationResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notifies++
	return &rocketmqv2.NotifyClientTerminationResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_OK}}, nil
}

// Telemetry reads the client's first command, answers with the server's
// Settings when set, then records what follows until the client goes or
// the test ends the stream.
func (s *rmqServer) Telemetry(stream rocketmqv2.MessagingService_TelemetryServer) error {
	end := make(chan struct{})
	s.mu.Lock()
	s.streams = append(s.streams, end)
	s.mu.Unlock()
	recvErr := make(chan error, 1)
	go func() {
		first := true
		for {
			cmd, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			s.mu.Lock()
			s.clientCmds = append(s.clientCmds, cmd)
			st, push := s.settings, s.push
			s.mu.Unlock()
			if first && st != nil {
				_ = stream.Send(&rocketmqv2.TelemetryCommand{
					Status:  &rocketmqv2.Status{Code: rocketmqv2.Code_OK},
					Command: &rocketmqv2.TelemetryCommand_Settings{Settings: st},
				})
				for _, p := range push {
					_ = stream.Send(p)
				}
			}
			first = false
		}
	}()
	select {
	case <-end:
		return nil
	case err := <-recvErr:
		return err
	}
}

// rmqServerSettings is a server's answer: a producer's max body size and
// an exponential backoff policy.
func rmqServerSettings(maxBody int32) *rocketmqv2.Settings {
	return &rocketmqv2.Settings{
		BackoffPolicy: &rocketmqv2.RetryPolicy{MaxAttempts: 4, Strategy: &rocketmqv2.RetryPolicy_ExponentialBackoff{
			ExponentialBackoff: &rocketmqv2.ExponentialBackoff{Multiplier: 2},
		}},
		PubSub: &rocketmqv2.Settings_Publishing{Publishing: &rocketmqv2.Publishing{MaxBodySize: maxBody, ValidateMessageType: true}},
	}
}
