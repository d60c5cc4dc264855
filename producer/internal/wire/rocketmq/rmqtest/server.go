// Package rmqtest is a scripted apache.rocketmq.v2 server for the tests of
// the producer and of its RocketMQ 5 client (producer/internal/wire/rocketmq):
// a real gRPC server on 127.0.0.1:0 that records what it is sent.
package rmqtest

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// Server is a test double of the remote side of apache.rocketmq.v2: a
// real gRPC server on 127.0.0.1:0 that records every call's metadata and
// every request, answers QueryRoute from its routes, SendMessage from
// answer, RecallMessage from recall, and Telemetry with settings (or not
// at all when settings is nil).
type Server struct {
	rocketmqv2.UnimplementedMessagingServiceServer
	Addr string
	srv  *grpc.Server

	mu sync.Mutex
	// What the test sets (under mu).
	routes   map[string][]*rocketmqv2.MessageQueue
	settings *rocketmqv2.Settings // the server's answer on Telemetry; nil: none
	answer   func(*rocketmqv2.SendMessageRequest) *rocketmqv2.SendMessageResponse
	recall   func(*rocketmqv2.RecallMessageRequest) *rocketmqv2.RecallMessageResponse
	push     []*rocketmqv2.TelemetryCommand // written after Settings on each stream
	// What the server saw (under mu: read them in Seen).
	Calls      []Call
	Sends      []*rocketmqv2.SendMessageRequest
	Queries    []*rocketmqv2.QueryRouteRequest
	Heartbeats []*rocketmqv2.HeartbeatRequest
	Recalls    []*rocketmqv2.RecallMessageRequest
	Notifies   int
	ClientCmds []*rocketmqv2.TelemetryCommand // every command a client wrote
	streams    []chan struct{}                // open Telemetry streams; close one to end it
	cmdNews    chan struct{}                  // closed (and replaced) when a client writes a command
}

// Call is a call the server saw: its method and metadata.
type Call struct {
	Method string
	MD     metadata.MD
}

// Start starts a server stopped at the test's end (or earlier with
// Stop).
func Start(t *testing.T) *Server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &Server{Addr: lis.Addr().String(), routes: map[string][]*rocketmqv2.MessageQueue{}}
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
	t.Cleanup(s.Stop)
	return s
}

// Stop stops the server, ending its streams.
func (s *Server) Stop() { s.srv.Stop() }

func (s *Server) see(ctx context.Context, method string) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	s.Calls = append(s.Calls, Call{method, md.Copy()})
	s.mu.Unlock()
}

// HostPort splits the server's address for a route.
func (s *Server) HostPort(t *testing.T) (string, int32) {
	h, p, err := net.SplitHostPort(s.Addr)
	require.NoError(t, err)
	n, err := strconv.Atoi(p)
	require.NoError(t, err)
	return h, int32(n)
}

// QueueOn is a writable queue id of broker name, served at srv.
func QueueOn(t *testing.T, srv *Server, topic, name string, id int32) *rocketmqv2.MessageQueue {
	h, p := srv.HostPort(t)
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

// SetRoute sets the route QueryRoute answers for topic.
func (s *Server) SetRoute(topic string, mqs ...*rocketmqv2.MessageQueue) {
	s.mu.Lock()
	s.routes[topic] = mqs
	s.mu.Unlock()
}

// SetSettings sets the server's Settings, written on each new stream;
// nil: none.
func (s *Server) SetSettings(st *rocketmqv2.Settings) {
	s.mu.Lock()
	s.settings = st
	s.mu.Unlock()
}

// SetAnswer sets SendMessage's answer; nil: OK, one entry per message.
func (s *Server) SetAnswer(f func(*rocketmqv2.SendMessageRequest) *rocketmqv2.SendMessageResponse) {
	s.mu.Lock()
	s.answer = f
	s.mu.Unlock()
}

// SetRecallAnswer sets RecallMessage's answer; nil: OK, the message ID
// "recalled".
func (s *Server) SetRecallAnswer(f func(*rocketmqv2.RecallMessageRequest) *rocketmqv2.RecallMessageResponse) {
	s.mu.Lock()
	s.recall = f
	s.mu.Unlock()
}

// SetPush sets the commands written after Settings on each new stream.
func (s *Server) SetPush(cmds ...*rocketmqv2.TelemetryCommand) {
	s.mu.Lock()
	s.push = cmds
	s.mu.Unlock()
}

// EndStreams ends every open Telemetry stream.
func (s *Server) EndStreams() {
	s.mu.Lock()
	for _, c := range s.streams {
		close(c)
	}
	s.streams = nil
	s.mu.Unlock()
}

// Seen returns a snapshot of what the server saw, under its lock.
func (s *Server) Seen(f func(s *Server)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// WaitClientSettings returns when a client has written Settings, or false
// when ctx ends first.
func (s *Server) WaitClientSettings(ctx context.Context) bool {
	for {
		s.mu.Lock()
		for _, c := range s.ClientCmds {
			if c.GetSettings() != nil {
				s.mu.Unlock()
				return true
			}
		}
		if s.cmdNews == nil {
			s.cmdNews = make(chan struct{})
		}
		news := s.cmdNews
		s.mu.Unlock()
		select {
		case <-news:
		case <-ctx.Done():
			return false
		}
	}
}

// ClientSettings returns the Settings the clients wrote.
func (s *Server) ClientSettings() []*rocketmqv2.Settings {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*rocketmqv2.Settings
	for _, c := range s.ClientCmds {
		if st := c.GetSettings(); st != nil {
			out = append(out, st)
		}
	}
	return out
}

func (s *Server) QueryRoute(_ context.Context, req *rocketmqv2.QueryRouteRequest) (*rocketmqv2.QueryRouteResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Queries = append(s.Queries, req)
	mqs, ok := s.routes[req.GetTopic().GetName()]
	if !ok {
		return &rocketmqv2.QueryRouteResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_TOPIC_NOT_FOUND, Message: "no such topic"}}, nil
	}
	return &rocketmqv2.QueryRouteResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_OK}, MessageQueues: mqs}, nil
}

func (s *Server) Heartbeat(_ context.Context, req *rocketmqv2.HeartbeatRequest) (*rocketmqv2.HeartbeatResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Heartbeats = append(s.Heartbeats, req)
	return &rocketmqv2.HeartbeatResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_OK}}, nil
}

func (s *Server) SendMessage(_ context.Context, req *rocketmqv2.SendMessageRequest) (*rocketmqv2.SendMessageResponse, error) {
	s.mu.Lock()
	s.Sends = append(s.Sends, proto.Clone(req).(*rocketmqv2.SendMessageRequest))
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

func (s *Server) RecallMessage(_ context.Context, req *rocketmqv2.RecallMessageRequest) (*rocketmqv2.RecallMessageResponse, error) {
	s.mu.Lock()
	s.Recalls = append(s.Recalls, proto.Clone(req).(*rocketmqv2.RecallMessageRequest))
	answer := s.recall
	s.mu.Unlock()
	if answer != nil {
		return answer(req), nil
	}
	return &rocketmqv2.RecallMessageResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_OK}, MessageId: "recalled"}, nil
}

func (s *Server) NotifyClientTermination(context.Context, *rocketmqv2.NotifyClientTerminationRequest) (*rocketmqv2.NotifyClientTerminationResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Notifies++
	return &rocketmqv2.NotifyClientTerminationResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_OK}}, nil
}

// Telemetry reads the client's first command, answers with the server's
// Settings when set, then records what follows until the client goes or
// the test ends the stream.
func (s *Server) Telemetry(stream rocketmqv2.MessagingService_TelemetryServer) error {
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
			s.ClientCmds = append(s.ClientCmds, cmd)
			if s.cmdNews != nil {
				close(s.cmdNews)
				s.cmdNews = nil
			}
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

// Settings is a server's answer: a producer's max body size and
// an exponential backoff policy.
func Settings(maxBody int32) *rocketmqv2.Settings {
	return &rocketmqv2.Settings{
		BackoffPolicy: &rocketmqv2.RetryPolicy{MaxAttempts: 4, Strategy: &rocketmqv2.RetryPolicy_ExponentialBackoff{
			ExponentialBackoff: &rocketmqv2.ExponentialBackoff{Multiplier: 2},
		}},
		PubSub: &rocketmqv2.Settings_Publishing{Publishing: &rocketmqv2.Publishing{MaxBodySize: maxBody, ValidateMessageType: true}},
	}
}

// QueueAt is a writable queue id of broker name whose endpoints are
// addrs (host:port each), as a route of a proxy cluster lists them.
func QueueAt(t *testing.T, topic, name string, id int32, addrs ...string) *rocketmqv2.MessageQueue {
	t.Helper()
	ep := &rocketmqv2.Endpoints{Scheme: rocketmqv2.AddressScheme_IPv4}
	for _, a := range addrs {
		h, p, err := net.SplitHostPort(a)
		require.NoError(t, err)
		n, err := strconv.Atoi(p)
		require.NoError(t, err)
		ep.Addresses = append(ep.Addresses, &rocketmqv2.Address{Host: h, Port: int32(n)})
	}
	return &rocketmqv2.MessageQueue{
		Topic: &rocketmqv2.Resource{Name: topic}, Id: id, Permission: rocketmqv2.Permission_READ_WRITE,
		Broker:             &rocketmqv2.Broker{Name: name, Endpoints: ep},
		AcceptMessageTypes: []rocketmqv2.MessageType{rocketmqv2.MessageType_NORMAL},
	}
}

// ClosedAddr is an address on 127.0.0.1 where nothing listens: a broker
// that refuses the connection.
func ClosedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}
