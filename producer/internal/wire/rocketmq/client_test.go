package wirermq

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/message"
	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq/rmqtest"
	"github.com/rocketry-go/rocketry/senderr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
)

// TestRmqSignature checks the authorization header against a vector
// computed outside Go (python3: hmac.new(b"secret-key",
// b"20231227T194619Z", hashlib.sha1).hexdigest().upper()) and against
// crypto/hmac.
func TestRmqSignature(t *testing.T) {
	const dt = "20231227T194619Z"
	const want = "MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, Signature=3D1E81C98F1CBA3DFFB05F99AD1CDBC89E6BA0EA"
	assert.Equal(t, want, rmqAuthorization("ak", "secret-key", dt))

	h := hmac.New(sha1.New, []byte("another"))
	h.Write([]byte("20260101T000000Z"))
	sig := strings.ToUpper(hex.EncodeToString(h.Sum(nil)))
	assert.Equal(t, "MQv2-HMAC-SHA1 Credential=key2, SignedHeaders=x-mq-date-time, Signature="+sig,
		rmqAuthorization("key2", "another", "20260101T000000Z"))
}

// TestRmqMetadataOnEveryCall: every call the client makes (Telemetry,
// QueryRoute, SendMessage, Heartbeat, NotifyClientTermination) carries the
// x-mq-* metadata and a signature that verifies against its own date-time.
func TestRmqMetadataOnEveryCall(t *testing.T) {
	srv := rmqtest.Start(t)
	srv.SetSettings(rmqtest.Settings(1 << 20))
	srv.SetRoute("orders", rmqtest.QueueOn(t, srv, "orders", "broker-a", 0))
	c := newTestRMQClient(t, []string{srv.Addr},
		func(c *Config) { c.AccessKey, c.SecretKey, c.SecurityToken = "ak", "sk", "sts-token" }, func(c *Config) { c.Namespace = "ns-1" })
	require.NoError(t, c.start(context.Background()))

	m := &message.Message{ID: c.ids.next(), Topic: "orders", Body: []byte("x")}
	o, unsent := c.newCall(m).attempt(context.Background(), 0, false, time.Time{})
	require.Equal(t, outcome.Stored, o.Kind, "%v", o.Err)
	require.False(t, unsent)
	require.Eventually(t, func() bool {
		n := 0
		srv.Seen(func(s *rmqtest.Server) { n = len(s.Heartbeats) })
		return n > 0
	}, 5*time.Second, 10*time.Millisecond)
	c.close(context.Background())

	methods := map[string]bool{}
	srv.Seen(func(s *rmqtest.Server) {
		for _, call := range s.Calls {
			methods[call.Method] = true
			md := call.MD
			get := func(k string) string {
				if v := md.Get(k); len(v) == 1 {
					return v[0]
				}
				return ""
			}
			assert.Equal(t, c.id, get("x-mq-client-id"), call.Method)
			assert.Equal(t, "GO", get("x-mq-language"), call.Method)
			assert.Equal(t, "v2", get("x-mq-protocol"), call.Method)
			assert.Equal(t, rmqClientVersion, get("x-mq-client-version"), call.Method)
			assert.Equal(t, "ns-1", get("x-mq-namespace"), call.Method)
			assert.Equal(t, "sts-token", get("x-mq-session-token"), call.Method)
			assert.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, get("x-mq-request-id"), call.Method)
			dt := get("x-mq-date-time")
			_, err := time.Parse(rmqDateTimeLayout, dt)
			assert.NoError(t, err, "%s: date-time %q", call.Method, dt)
			assert.Equal(t, rmqAuthorization("ak", "sk", dt), get("authorization"), call.Method)
		}
	})
	for _, m := range []string{"Telemetry", "QueryRoute", "SendMessage", "Heartbeat", "NotifyClientTermination"} {
		assert.True(t, methods["/apache.rocketmq.v2.MessagingService/"+m], "no %s call", m)
	}
}

// Without credentials or namespace, those headers are absent.
func TestRmqMetadataAnonymous(t *testing.T) {
	c := newTestRMQClient(t, []string{"127.0.0.1:1"})
	ctx := c.outgoing(context.Background())
	md, _ := metadata.FromOutgoingContext(ctx)
	for _, k := range []string{"authorization", "x-mq-namespace", "x-mq-session-token"} {
		assert.Empty(t, md.Get(k), k)
	}
	assert.Equal(t, []string{c.id}, md.Get("x-mq-client-id"))
}

func TestRmqInterleave(t *testing.T) {
	mq := func(broker string, id int32, perm rocketmqv2.Permission, brokerID int32) *rocketmqv2.MessageQueue {
		return &rocketmqv2.MessageQueue{Id: id, Permission: perm, Broker: &rocketmqv2.Broker{
			Name: broker, Id: brokerID,
			Endpoints: &rocketmqv2.Endpoints{Addresses: []*rocketmqv2.Address{{Host: "10.0.0." + broker[len(broker)-1:], Port: 8081}}},
		}}
	}
	rw, w, r := rocketmqv2.Permission_READ_WRITE, rocketmqv2.Permission_WRITE, rocketmqv2.Permission_READ
	got := interleave([]*rocketmqv2.MessageQueue{
		mq("a1", 0, rw, 0), mq("a1", 1, rw, 0), mq("a1", 2, w, 0),
		mq("b2", 0, rw, 0), mq("b2", 1, rw, 0),
		mq("c3", 0, w, 0),
		mq("d4", 0, r, 0),  // not writable
		mq("e5", 0, rw, 1), // a follower
		{Id: 9, Permission: rw, Broker: &rocketmqv2.Broker{Name: "f6"}}, // no address
	})
	var names []string
	for _, q := range got {
		names = append(names, q.broker+"/"+string(rune('0'+q.id)))
	}
	assert.Equal(t, []string{"a1/0", "b2/0", "c3/0", "a1/1", "b2/1", "a1/2"}, names)
	assert.Equal(t, "10.0.0.1:8081", got[0].addr)

	// Endpoint ep is queue ep % n; ep and ep+1 are on different brokers
	// wherever two brokers have queues left.
	r6 := &rmqRoute{queues: got}
	for ep := 0; ep < 4; ep++ {
		assert.NotEqual(t, r6.queue(ep).broker, r6.queue(ep+1).broker, "ep %d", ep)
	}
	assert.Equal(t, r6.queue(1), r6.queue(7))
	assert.Empty(t, interleave(nil))
}

// TestRmqRouteThroughAttempts: attempts on ep and ep+1 reach two brokers,
// each on its own address, with the queue id of the chosen queue.
func TestRmqRouteThroughAttempts(t *testing.T) {
	a, b := rmqtest.Start(t), rmqtest.Start(t)
	a.SetSettings(rmqtest.Settings(0))
	a.SetRoute("t", rmqtest.QueueOn(t, a, "t", "broker-a", 0), rmqtest.QueueOn(t, a, "t", "broker-a", 1), rmqtest.QueueOn(t, b, "t", "broker-b", 7))
	c := newTestRMQClient(t, []string{a.Addr})
	require.NoError(t, c.start(context.Background()))

	call := c.newCall(&message.Message{ID: c.ids.next(), Topic: "t", Body: []byte("b")})
	for ep, want := range []string{"broker-a", "broker-b", "broker-a"} {
		o, _ := call.attempt(context.Background(), ep, false, time.Time{})
		require.Equal(t, outcome.Stored, o.Kind, "ep %d: %v", ep, o.Err)
		assert.Equal(t, want, call.Endpoint(ep), "ep %d", ep)
	}
	var queuesA, queuesB []int32
	a.Seen(func(s *rmqtest.Server) {
		for _, r := range s.Sends {
			queuesA = append(queuesA, r.GetMessages()[0].GetSystemProperties().GetQueueId())
		}
		assert.Len(t, s.Queries, 1, "one QueryRoute for the send")
		assert.Equal(t, "t", s.Queries[0].GetTopic().GetName())
	})
	b.Seen(func(s *rmqtest.Server) {
		for _, r := range s.Sends {
			queuesB = append(queuesB, r.GetMessages()[0].GetSystemProperties().GetQueueId())
		}
	})
	assert.Equal(t, []int32{0, 1}, queuesA)
	assert.Equal(t, []int32{7}, queuesB)

	// The new topic is declared in the Settings written afterwards.
	require.Eventually(t, func() bool {
		for _, st := range a.ClientSettings() {
			if ts := st.GetPublishing().GetTopics(); len(ts) == 1 && ts[0].GetName() == "t" {
				return true
			}
		}
		return false
	}, 5*time.Second, 10*time.Millisecond)
}

func TestRmqRouteErrors(t *testing.T) {
	srv := rmqtest.Start(t)
	srv.SetSettings(rmqtest.Settings(0))
	c := newTestRMQClient(t, []string{srv.Addr})
	require.NoError(t, c.start(context.Background()))

	// TOPIC_NOT_FOUND: permanent, and nothing was sent.
	o, unsent := c.newCall(&message.Message{ID: "1", Topic: "nope"}).attempt(context.Background(), 0, false, time.Time{})
	assert.Equal(t, outcome.Permanent, o.Kind)
	assert.Equal(t, int32(rocketmqv2.Code_TOPIC_NOT_FOUND), o.WireCode)
	assert.True(t, unsent)

	// A route without a writable queue: known not stored.
	ro := rmqtest.QueueOn(t, srv, "ro", "broker-a", 0)
	ro.Permission = rocketmqv2.Permission_READ
	srv.SetRoute("ro", ro)
	o, unsent = c.newCall(&message.Message{ID: "2", Topic: "ro"}).attempt(context.Background(), 0, false, time.Time{})
	assert.Equal(t, outcome.FailedNotStored, o.Kind)
	assert.True(t, errors.Is(o.Err, errNoWritableQueue), "%v", o.Err)
	assert.True(t, unsent)
}

// TestRmqSendUnreachable: a request that never reached a transport is
// unsent, and a refused connection is named: known not stored.
func TestRmqSendUnreachable(t *testing.T) {
	srv := rmqtest.Start(t)
	srv.SetSettings(rmqtest.Settings(0))
	gone := rmqtest.Start(t)
	srv.SetRoute("t", rmqtest.QueueOn(t, gone, "t", "broker-gone", 0))
	gone.Stop()
	c := newTestRMQClient(t, []string{srv.Addr})
	require.NoError(t, c.start(context.Background()))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	o, unsent := c.newCall(&message.Message{ID: "1", Topic: "t"}).attempt(ctx, 0, false, time.Time{})
	assert.Equal(t, outcome.FailedNotStored, o.Kind, "a refused connection: %v", o.Err)
	assert.ErrorIs(t, o.Err, senderr.ErrConnectionRefused, "named as the public API names it (senderr)")
	assert.True(t, unsent, "the request never left: %v", o.Err)
}

// TestRmqStartWaitsForSettings: start returns once the server's Settings
// arrive, and records its max body size and retry advice.
func TestRmqStartWaitsForSettings(t *testing.T) {
	srv := rmqtest.Start(t)
	c := newTestRMQClient(t, []string{srv.Addr}, func(c *Config) { c.Send.AttemptTimeout = 5 * time.Second })
	var given atomic.Bool
	go func() {
		// The client has sent its Settings and waits for the server's.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.WaitClientSettings(ctx)
		given.Store(true)
		srv.SetSettings(rmqtest.Settings(4096))
		srv.EndStreams() // the client reopens and gets the Settings now
	}()
	require.NoError(t, c.start(context.Background()))
	assert.True(t, given.Load(), "start returned before the server had Settings to give")
	assert.Equal(t, 4096, c.maxBodySize())
	require.NotNil(t, c.serverRetryPolicy())
	assert.Equal(t, int32(4), c.serverRetryPolicy().GetMaxAttempts())

	sts := srv.ClientSettings()
	require.NotEmpty(t, sts)
	st := sts[0]
	assert.Equal(t, rocketmqv2.ClientType_PRODUCER, st.GetClientType())
	assert.Equal(t, 5*time.Second, st.GetRequestTimeout().AsDuration())
	assert.Equal(t, rocketmqv2.Language_GOLANG, st.GetUserAgent().GetLanguage())
	assert.Equal(t, rmqClientVersion, st.GetUserAgent().GetVersion())
	require.Len(t, st.GetAccessPoint().GetAddresses(), 1)
	assert.Equal(t, rocketmqv2.AddressScheme_IPv4, st.GetAccessPoint().GetScheme())
	assert.NotNil(t, st.GetPublishing())
}

// TestRmqStartTimeout: a server that never sends Settings fails start with
// an error that says so, and leaves no goroutine behind.
func TestRmqStartTimeout(t *testing.T) {
	srv := rmqtest.Start(t)
	ignore := goleak.IgnoreCurrent()
	c := newTestRMQClient(t, []string{srv.Addr}, func(c *Config) { c.Send.AttemptTimeout = 200 * time.Millisecond })
	err := c.start(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no Settings from "+srv.Addr+" within 200ms")
	srv.Stop()
	goleak.VerifyNone(t, ignore)
}

func TestRmqStartCanceled(t *testing.T) {
	srv := rmqtest.Start(t)
	c := newTestRMQClient(t, []string{srv.Addr})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := c.start(ctx)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Error(t, c.start(context.Background()), "start after a failed start")
}

// TestRmqTelemetryReopens: a stream the server ends is opened again, with
// the client's Settings first.
func TestRmqTelemetryReopens(t *testing.T) {
	srv := rmqtest.Start(t)
	srv.SetSettings(rmqtest.Settings(0))
	c := newTestRMQClient(t, []string{srv.Addr})
	require.NoError(t, c.start(context.Background()))
	srv.EndStreams()
	require.Eventually(t, func() bool { return len(srv.ClientSettings()) >= 2 }, 5*time.Second, 10*time.Millisecond)
}

// TestRmqTelemetryCommands: the client answers the server's commands on
// the stream, and opens a new stream when asked to reconnect.
func TestRmqTelemetryCommands(t *testing.T) {
	srv := rmqtest.Start(t)
	srv.SetSettings(rmqtest.Settings(0))
	srv.SetPush(
		&rocketmqv2.TelemetryCommand{Command: &rocketmqv2.TelemetryCommand_PrintThreadStackTraceCommand{PrintThreadStackTraceCommand: &rocketmqv2.PrintThreadStackTraceCommand{Nonce: "n1"}}},
		&rocketmqv2.TelemetryCommand{Command: &rocketmqv2.TelemetryCommand_VerifyMessageCommand{VerifyMessageCommand: &rocketmqv2.VerifyMessageCommand{Nonce: "n2"}}},
		&rocketmqv2.TelemetryCommand{Command: &rocketmqv2.TelemetryCommand_RecoverOrphanedTransactionCommand{RecoverOrphanedTransactionCommand: &rocketmqv2.RecoverOrphanedTransactionCommand{TransactionId: "tx"}}},
		&rocketmqv2.TelemetryCommand{Command: &rocketmqv2.TelemetryCommand_ReconnectEndpointsCommand{ReconnectEndpointsCommand: &rocketmqv2.ReconnectEndpointsCommand{Nonce: "n3"}}},
	)
	c := newTestRMQClient(t, []string{srv.Addr})
	require.NoError(t, c.start(context.Background()))
	require.Eventually(t, func() bool {
		var stack, verify bool
		srv.Seen(func(s *rmqtest.Server) {
			for _, cmd := range s.ClientCmds {
				if st := cmd.GetThreadStackTrace(); st != nil && st.GetNonce() == "n1" && strings.Contains(st.GetThreadStackTrace(), "goroutine") {
					stack = true
				}
				if v := cmd.GetVerifyMessageResult(); v != nil && v.GetNonce() == "n2" && cmd.GetStatus().GetCode() == rocketmqv2.Code_NOT_IMPLEMENTED {
					verify = true
				}
			}
		})
		// ReconnectEndpointsCommand: the stream was opened again.
		return stack && verify && len(srv.ClientSettings()) >= 2
	}, 5*time.Second, 10*time.Millisecond)
}

func TestRmqHeartbeat(t *testing.T) {
	srv := rmqtest.Start(t)
	srv.SetSettings(rmqtest.Settings(0))
	c := newTestRMQClient(t, []string{srv.Addr})
	require.NoError(t, c.start(context.Background()))
	require.Eventually(t, func() bool {
		n := 0
		srv.Seen(func(s *rmqtest.Server) {
			for _, h := range s.Heartbeats {
				if h.GetClientType() == rocketmqv2.ClientType_PRODUCER && h.Group == nil {
					n++
				}
			}
		})
		return n >= 2
	}, 5*time.Second, 10*time.Millisecond)
}

// TestRmqCloseNotifiesAndStops: close sends NotifyClientTermination to each
// server and every goroutine of the client ends.
func TestRmqCloseNotifiesAndStops(t *testing.T) {
	a, b := rmqtest.Start(t), rmqtest.Start(t)
	ignore := goleak.IgnoreCurrent()
	a.SetSettings(rmqtest.Settings(0))
	b.SetSettings(rmqtest.Settings(0))
	c := newTestRMQClient(t, []string{a.Addr, b.Addr})
	require.NoError(t, c.start(context.Background()))
	c.close(context.Background())
	c.close(context.Background()) // a second close does nothing
	for _, s := range []*rmqtest.Server{a, b} {
		s.Seen(func(s *rmqtest.Server) { assert.Equal(t, 1, s.Notifies) })
	}
	a.Stop()
	b.Stop()
	goleak.VerifyNone(t, ignore)

	_, err := c.conn(a.Addr)
	assert.ErrorIs(t, err, senderr.ErrClosed)
}

func TestNewRMQClientTarget(t *testing.T) {
	cfg := testConfig()
	for _, bad := range [][]string{nil, {"nohost"}, {":80"}, {"h:0"}, {"h:70000"}, {"h:x"}} {
		_, err := newRMQClient(bad, cfg)
		assert.Error(t, err, "%q", bad)
	}
	c, err := newRMQClient([]string{"proxy-a:8081", "10.0.0.1:8081"}, cfg)
	require.NoError(t, err)
	defer c.close(context.Background())
	assert.Equal(t, rocketmqv2.AddressScheme_DOMAIN_NAME, c.accessPoint.GetScheme())
	assert.Len(t, c.accessPoint.GetAddresses(), 2)
	c6, err := newRMQClient([]string{"[::1]:8081"}, cfg)
	require.NoError(t, err)
	defer c6.close(context.Background())
	assert.Equal(t, rocketmqv2.AddressScheme_IPv6, c6.accessPoint.GetScheme())
	assert.Equal(t, "::1", c6.accessPoint.GetAddresses()[0].GetHost())
}

// TestRmqDialOptionsKeepalive: every connection has the keepalive after
// its credentials and before the producer's own dial options, which gRPC
// applies last, so that a user's WithKeepaliveParams replaces it; a
// broker of several addresses keeps that order.
func TestRmqDialOptionsKeepalive(t *testing.T) {
	own := grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: time.Hour})
	c, err := newRMQClient([]string{"127.0.0.1:8081"}, Config{Send: testConfig().Send, Dial: []grpc.DialOption{own}})
	require.NoError(t, err)
	defer c.close(context.Background())
	opts := c.dialOptions()
	require.Len(t, opts, 3)
	assert.Equal(t, rmqKeepalive, opts[1])
	assert.Equal(t, own, opts[2], "the user's last")

	_, multi := multiAddrTarget("127.0.0.1:1;127.0.0.1:2", opts)
	ka, user := slices.Index(multi, rmqKeepalive), slices.Index(multi, own)
	assert.True(t, ka > 0 && user > ka, "keepalive at %d, the user's at %d", ka, user)
}
