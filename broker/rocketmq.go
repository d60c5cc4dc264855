package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
)

// rocketmqServer serves apache.rocketmq.v2.MessagingService, the RocketMQ
// 5 gRPC protocol, for official RocketMQ clients: a route, Settings over
// Telemetry, heartbeats, sends through the same send core, store,
// throttling and faults as rocketry.v1, answered as the RocketMQ 5 proxy
// answers them (rocketmq_send.go), and a SimpleConsumer's calls over the
// same consumer groups (rocketmq_consumer.go).
type rocketmqServer struct {
	rocketmqv2.UnimplementedMessagingServiceServer
	b *Broker
}

// v2Status is a body status.
func v2Status(code rocketmqv2.Code, msg string) *rocketmqv2.Status {
	return &rocketmqv2.Status{Code: code, Message: msg}
}

func v2OK() *rocketmqv2.Status { return v2Status(rocketmqv2.Code_OK, "OK") }

// acceptedTypes are the message types every queue of a route accepts.
var acceptedTypes = []rocketmqv2.MessageType{
	rocketmqv2.MessageType_NORMAL, rocketmqv2.MessageType_FIFO,
	rocketmqv2.MessageType_DELAY, rocketmqv2.MessageType_TRANSACTION,
}

// QueryRoute answers the topic's queues: WithQueues queues on this broker
// (ids 0..n-1, READ_WRITE, accepting the type the topic was declared with
// by WithTopicType, else every type but LITE and PRIORITY) under its broker
// name (WithBrokerName), then as many on each peer (WithRoutePeers). This
// broker's endpoints are the access points the client used, every address
// of the request's endpoints, as a proxy in cluster mode answers
// (ClusterTopicRouteService builds every broker of a route from the
// request's addresses; see
// proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/route/RouteActivity.java),
// so that a client that dialled "a;b" is sent to "a;b" again; a request
// without endpoints gets the broker's own address, its unspecified host
// (0.0.0.0, [::]) replaced by 127.0.0.1. With peers (WithRoutePeers) the
// broker answers as a proxy in local mode instead, whatever the client
// dialled: every broker, this one included, at its own addresses
// (proxy/src/main/java/org/apache/rocketmq/proxy/service/route/LocalTopicRouteService.java,
// getTopicRouteForProxy, lists the local broker at its own host). Several
// processes are not one cluster-mode proxy: listing this broker at the
// access points of all of them would make one broker look like several to
// a client given every access point, and a retry "on the same broker"
// could store a second copy on another. An unknown topic is 40402 TOPIC_NOT_FOUND when the
// broker does not create topics; otherwise the topic is created by its
// first send.
func (s rocketmqServer) QueryRoute(ctx context.Context, req *rocketmqv2.QueryRouteRequest) (*rocketmqv2.QueryRouteResponse, error) {
	b := s.b
	name := req.GetTopic().GetName()
	if r := checkRocketMQTopic(name); r != nil {
		return &rocketmqv2.QueryRouteResponse{Status: v2Status(rocketmqv2.Code_ILLEGAL_TOPIC, r.msg)}, nil
	}
	if !b.cfg.autoCreate && b.lookupTopic(name) == nil {
		return &rocketmqv2.QueryRouteResponse{Status: v2Status(rocketmqv2.Code_TOPIC_NOT_FOUND,
			fmt.Sprintf("broker: topic %q not found (the broker does not create topics)", name))}, nil
	}
	topic := &rocketmqv2.Resource{ResourceNamespace: req.GetTopic().GetResourceNamespace(), Name: name}
	resp := &rocketmqv2.QueryRouteResponse{Status: v2OK()}
	for _, br := range b.routeBrokers(req.GetEndpoints()) {
		for q := range b.cfg.queues {
			resp.MessageQueues = append(resp.MessageQueues, &rocketmqv2.MessageQueue{
				Topic: topic, Id: int32(q), Permission: rocketmqv2.Permission_READ_WRITE,
				Broker: br, AcceptMessageTypes: b.acceptedTypesOf(name),
			})
		}
	}
	return resp, nil
}

// routeBrokers are the brokers of a route as QueryRoute lists them, for a
// request whose access points are reqEndpoints: this broker first, then
// each peer (WithRoutePeers) but this one.
func (b *Broker) routeBrokers(reqEndpoints *rocketmqv2.Endpoints) []*rocketmqv2.Broker {
	self := b.Addr()
	var own *rocketmqv2.Endpoints
	if b.cfg.peers == nil {
		own = accessPoints(reqEndpoints)
	}
	if own == nil {
		own = endpoints(advertised(self))
	}
	brokers := []*rocketmqv2.Broker{{Name: b.cfg.brokerName, Endpoints: own}}
	if b.cfg.peers != nil {
		for _, p := range b.cfg.peers() {
			if p.Addr != self {
				brokers = append(brokers, &rocketmqv2.Broker{Name: p.Name, Endpoints: endpoints(p.Addr, p.Addrs...)})
			}
		}
	}
	return brokers
}

// accessPoints is a copy of the endpoints a client used, nil when they
// have no address.
func accessPoints(e *rocketmqv2.Endpoints) *rocketmqv2.Endpoints {
	if len(e.GetAddresses()) == 0 {
		return nil
	}
	out := &rocketmqv2.Endpoints{Scheme: e.GetScheme()}
	for _, a := range e.GetAddresses() {
		out.Addresses = append(out.Addresses, &rocketmqv2.Address{Host: a.GetHost(), Port: a.GetPort()})
	}
	return out
}

// advertised is addr with an unspecified host (0.0.0.0, [::]) replaced by
// 127.0.0.1.
func advertised(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
		return addr
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// endpoints is the addresses ("host:port") of one broker as v2 Endpoints,
// their scheme the first address's.
func endpoints(addr string, more ...string) *rocketmqv2.Endpoints {
	e := &rocketmqv2.Endpoints{}
	for i, a := range append([]string{addr}, more...) {
		host, portStr, err := net.SplitHostPort(a)
		if err != nil {
			host, portStr = a, "0"
		}
		port, _ := strconv.Atoi(portStr)
		if i == 0 {
			e.Scheme = rocketmqv2.AddressScheme_DOMAIN_NAME
			if ip := net.ParseIP(host); ip != nil {
				e.Scheme = rocketmqv2.AddressScheme_IPv6
				if ip.To4() != nil {
					e.Scheme = rocketmqv2.AddressScheme_IPv4
				}
			}
		}
		e.Addresses = append(e.Addresses, &rocketmqv2.Address{Host: host, Port: int32(port)})
	}
	return e
}

// Heartbeat answers OK: the broker keeps no client state.
func (s rocketmqServer) Heartbeat(context.Context, *rocketmqv2.HeartbeatRequest) (*rocketmqv2.HeartbeatResponse, error) {
	return &rocketmqv2.HeartbeatResponse{Status: v2OK()}, nil
}

// NotifyClientTermination answers OK.
func (s rocketmqServer) NotifyClientTermination(context.Context, *rocketmqv2.NotifyClientTerminationRequest) (*rocketmqv2.NotifyClientTerminationResponse, error) {
	return &rocketmqv2.NotifyClientTerminationResponse{Status: v2OK()}, nil
}

// Telemetry answers each Settings the client sends with the broker's
// Settings (settingsFor) and ignores the client's other commands. A
// producer's stream also carries the broker's checks of its orphaned
// transactions (rocketmq_tx.go). The stream stays open until the client
// closes it, the connection breaks, or the broker stops or restarts.
func (s rocketmqServer) Telemetry(stream grpc.BidiStreamingServer[rocketmqv2.TelemetryCommand, rocketmqv2.TelemetryCommand]) error {
	b := s.b
	ctx := stream.Context()
	if !b.trackStream() {
		return status.Error(codes.Unavailable, "broker: stopping")
	}
	cmds := make(chan *rocketmqv2.TelemetryCommand)
	ended := make(chan error, 1)
	go func() { // the only reader: Recv has no select
		defer b.streams.Done()
		for {
			c, err := stream.Recv()
			if err != nil {
				ended <- err
				return
			}
			select {
			case cmds <- c:
			case <-ctx.Done():
				return
			}
		}
	}()
	var peer *telemetryPeer // a producer's, after its first Settings
	var checks chan *rocketmqv2.TelemetryCommand
	defer func() {
		if peer != nil {
			b.telemetry.remove(peer)
		}
	}()
	for {
		select {
		case c := <-checks:
			if err := stream.Send(c); err != nil {
				return err
			}
		case c := <-cmds:
			if refused := b.authRefusal(ctx, "Telemetry"); refused != nil {
				// The proxy's answer: the status alone, then the end (rocketmq_acl.go).
				return stream.Send(&rocketmqv2.TelemetryCommand{Status: refused})
			}
			st := c.GetSettings()
			if st == nil {
				continue
			}
			if peer == nil {
				if peer = b.newTelemetryPeer(ctx, st); peer != nil {
					checks = peer.out
				}
			} else {
				b.telemetry.update(peer, st) // a producer's new topics
			}
			if err := stream.Send(&rocketmqv2.TelemetryCommand{
				Status:  v2OK(),
				Command: &rocketmqv2.TelemetryCommand_Settings{Settings: b.settingsFor(st)},
			}); err != nil {
				return err
			}
		case err := <-ended:
			if errors.Is(err, io.EOF) {
				return nil // the client closed its side
			}
			return err
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-b.stopCh:
			return status.Error(codes.Unavailable, "broker: stopping")
		}
	}
}

// trackStream counts a Telemetry reader that Stop waits for, unless the
// broker is stopped: then Stop may be waiting already.
func (b *Broker) trackStream() bool {
	b.srvMu.Lock()
	defer b.srvMu.Unlock()
	if b.stopped {
		return false
	}
	b.streams.Add(1)
	return true
}

// settingsFor is the broker's answer to a client's Settings, made as the
// RocketMQ 5 proxy makes it: the client's own Settings with the broker's
// backoff_policy (WithClientRetryPolicy), a request_timeout
// (the client's, or 3 s), and, for a publisher, max_body_size set to the
// broker's limit (WithMaxBodyBytes) and validate_message_type on; for a
// consumer, the proxy's subscription fields and the group's retry policy
// instead (mergeSubscription).
//
// The client's publishing topics are not copied: the answer shares the
// slice of the client's message (which the stream's goroutine owns and no
// one changes), so that a producer's Settings of n topics cost the broker
// one read and one write of them, not a deep copy besides.
func (b *Broker) settingsFor(client *rocketmqv2.Settings) *rocketmqv2.Settings {
	var topics []*rocketmqv2.Resource
	if pub := client.GetPublishing(); pub != nil {
		topics, pub.Topics = pub.Topics, nil
		defer func() { pub.Topics = topics }()
	}
	st := proto.Clone(client).(*rocketmqv2.Settings)
	p := b.cfg.clientRetry
	st.BackoffPolicy = &rocketmqv2.RetryPolicy{
		MaxAttempts: int32(p.maxAttempts),
		Strategy: &rocketmqv2.RetryPolicy_ExponentialBackoff{ExponentialBackoff: &rocketmqv2.ExponentialBackoff{
			Initial:    durationpb.New(p.initial),
			Max:        durationpb.New(p.max),
			Multiplier: float32(p.multiplier),
		}},
	}
	if st.RequestTimeout == nil {
		st.RequestTimeout = durationpb.New(DefaultClientRequestTimeout)
	}
	if pub := st.GetPublishing(); pub != nil {
		pub.Topics = topics
		pub.MaxBodySize = int32(b.cfg.maxBody)
		pub.ValidateMessageType = true
	}
	if sub := st.GetSubscription(); sub != nil {
		b.mergeSubscription(st, sub)
	}
	return st
}

// The retry policy of a consumer group as the proxy answers it to a
// consumer (GrpcClientSettingsManager.mergeSubscriptionData, from a
// default SubscriptionGroupConfig): retryMaxTimes 16, so 17 attempts, and
// the CUSTOMIZED GroupRetryPolicy, whose delays are CustomizedRetryPolicy's
// (the old delay levels 1s ... 2h).
const consumerMaxAttempts = 16 + 1

var consumerBackoff = []time.Duration{
	time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 3 * time.Minute, 4 * time.Minute, 5 * time.Minute,
	6 * time.Minute, 7 * time.Minute, 8 * time.Minute, 9 * time.Minute, 10 * time.Minute,
	20 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour,
}

// mergeSubscription fills a consumer's Settings as the proxy's
// GrpcClientSettingsManager.mergeSubscriptionData does
// (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/common/GrpcClientSettingsManager.java):
// receive_batch_size 32 (grpcClientConsumerLongPollingBatchSize), the
// longest long polling time as long_polling_timeout
// (grpcClientConsumerMaxLongPollingTimeoutMillis; WithLongPolling's max
// here), fifo from the group (false: the broker's groups are not orderly)
// and the group's retry policy as backoff_policy. A PushConsumer depends
// on them: the official Node.js client receives with the batch size and
// long polling timeout of these Settings, a batch size of 0 when they have
// none. The backoff is a customized_backoff, which the Node.js client does
// not take (it keeps no retry policy, so it retries a failed message at
// once and a FIFO one never).
func (b *Broker) mergeSubscription(st *rocketmqv2.Settings, sub *rocketmqv2.Subscription) {
	sub.ReceiveBatchSize = proto.Int32(maxReceiveBatch)
	sub.LongPollingTimeout = durationpb.New(b.cfg.maxPolling)
	sub.Fifo = proto.Bool(false)
	next := make([]*durationpb.Duration, len(consumerBackoff))
	for i, d := range consumerBackoff {
		next[i] = durationpb.New(d)
	}
	st.BackoffPolicy = &rocketmqv2.RetryPolicy{
		MaxAttempts: consumerMaxAttempts,
		Strategy:    &rocketmqv2.RetryPolicy_CustomizedBackoff{CustomizedBackoff: &rocketmqv2.CustomizedBackoff{Next: next}},
	}
}
