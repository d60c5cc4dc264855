package producer

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
)

// This file tests that a refusal of the producer's credentials is final
// (issue "rocketry inside a real Go service", item 2): at start, New
// returns at the first refused call instead of waiting out its start
// timeout and opening Telemetry again; on a send, the one attempt fails
// with the refusal. No test reads the wall clock: the start timeout is
// set far beyond the test's own timeout, so a New that waited for it
// would not return, and the servers count the calls they refused.

// aclTimeout is the start timeout (and attempt timeout) of the producers
// here: one that waited it out would fail the test by its timeout.
const aclTimeout = time.Hour

// assertRefusal checks err is a refusal of accessKey's credentials by a
// server that answered code: the sentinel, the gRPC code, the public
// error types in the chain, the access key named and secret not.
func assertRefusal(t *testing.T, err error, accessKey, secret string, code codes.Code) *AuthError {
	t.Helper()
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrUnauthorized)
	assert.Equal(t, code == codes.PermissionDenied, errors.Is(err, ErrForbidden), "ErrForbidden for a refused permission only")
	assert.Equal(t, code, status.Code(err), "the gRPC code is reachable")
	var ae *AuthError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, accessKey, ae.AccessKey)
	if accessKey != "" {
		assert.Contains(t, err.Error(), `access key "`+accessKey+`"`)
	}
	if secret != "" {
		assert.NotContains(t, err.Error(), secret, "the secret is never in the error")
	}
	return ae
}

func TestRmqWrongSecretFailsNewAtOnce(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, broker.WithACL(map[string]string{"app": "right-secret"}))
	_, err := New(b.Addr(), WithProtocol(RocketMQ5), WithAttemptTimeout(aclTimeout),
		WithCredentials("app", "wrong-secret", ""))
	ae := assertRefusal(t, err, "app", "wrong-secret", codes.Unauthenticated)
	assert.Equal(t, b.Addr(), ae.Endpoint)
	var rs *RocketMQStatusError
	require.ErrorAs(t, err, &rs, "the server's status is reachable")
	assert.Equal(t, int32(rocketmqv2.Code_UNAUTHORIZED), rs.Code)
	assert.Equal(t, "check signature failed.", rs.Message, "the proxy's words")
	assert.NotContains(t, err.Error(), "within", "not the start timeout's error")
	// One refused call: the first Telemetry command; the stream was not
	// opened again, and nothing else was called.
	assert.Equal(t, int64(1), b.AuthRefused("Telemetry"))
	assert.Equal(t, int64(1), b.AuthRefused(""))
}

func TestRmqUnknownKeyAndNoCredentialsRefused(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, broker.WithACL(map[string]string{"app": "secret"}))
	_, err := New(b.Addr(), WithProtocol(RocketMQ5), WithAttemptTimeout(aclTimeout),
		WithCredentials("stranger", "secret", ""))
	assertRefusal(t, err, "stranger", "", codes.Unauthenticated)
	assert.Contains(t, err.Error(), "User:stranger is not found.")

	_, err = New(b.Addr(), WithProtocol(RocketMQ5), WithAttemptTimeout(aclTimeout))
	assertRefusal(t, err, "", "", codes.Unauthenticated)
	assert.Contains(t, err.Error(), "without credentials")
	assert.Contains(t, err.Error(), "authentication header is null")
	assert.Equal(t, int64(2), b.AuthRefused("Telemetry"), "one refused call per New")
}

func TestRmqRightCredentialsWork(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, broker.WithACL(map[string]string{"app": "right-secret"}))
	p := newTestProducer(t, b.Addr(), WithProtocol(RocketMQ5), WithCredentials("app", "right-secret", ""))
	_, err := p.Send(context.Background(), &Message{Topic: "t", Body: []byte("x")})
	require.NoError(t, err)
	assert.Equal(t, int64(1), b.Stats().Stored)
	assert.Zero(t, b.AuthRefused(""))
}

// TestRmqRevokedCredentialsFailSendAtOnce revokes the producer's key while
// it runs: the next send fails after its one attempt, though it may make
// five, and the broker refused that one call.
func TestRmqRevokedCredentialsFailSendAtOnce(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, broker.WithACL(map[string]string{"app": "right-secret"}))
	p := newTestProducer(t, b.Addr(), WithProtocol(RocketMQ5), WithCredentials("app", "right-secret", ""),
		WithMaxAttempts(5), WithAttemptTimeout(aclTimeout))
	_, err := p.Send(context.Background(), &Message{Topic: "t", Body: []byte("x")})
	require.NoError(t, err)

	b.SetACL(map[string]string{"app": "rotated-secret"})
	_, err = p.Send(context.Background(), &Message{Topic: "t", Body: []byte("y")})
	assertRefusal(t, err, "app", "right-secret", codes.Unauthenticated)
	var se *SendError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 1, se.Attempts, "no retry")
	assert.ErrorIs(t, err, ErrNotRetryable)
	assert.Equal(t, int32(rocketmqv2.Code_UNAUTHORIZED), se.WireCode)
	assert.Equal(t, int64(1), b.AuthRefused("SendMessage"))
	assert.Equal(t, int64(1), b.Stats().Stored, "the refused message is not stored")

	// A new topic needs a route: its look-up is refused, once.
	_, err = p.Send(context.Background(), &Message{Topic: "u", Body: []byte("z")})
	assertRefusal(t, err, "app", "", codes.Unauthenticated)
	assert.Equal(t, int64(1), b.AuthRefused("QueryRoute"))
}

// grpcRefuser is a server in front of RocketMQ that refuses every
// Telemetry stream with a gRPC code, as a gateway does, and counts them.
type grpcRefuser struct {
	rocketmqv2.UnimplementedMessagingServiceServer
	code  codes.Code
	calls atomic.Int64
}

func (s *grpcRefuser) Telemetry(grpc.BidiStreamingServer[rocketmqv2.TelemetryCommand, rocketmqv2.TelemetryCommand]) error {
	s.calls.Add(1)
	return status.Error(s.code, "gateway: who are you")
}

func startRefuser(t *testing.T, code codes.Code) (*grpcRefuser, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &grpcRefuser{code: code}
	srv := grpc.NewServer()
	rocketmqv2.RegisterMessagingServiceServer(srv, s)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return s, lis.Addr().String()
}

func TestRmqGRPCRefusalFailsNewAtOnce(t *testing.T) {
	t.Parallel()
	for _, code := range []codes.Code{codes.Unauthenticated, codes.PermissionDenied} {
		t.Run(code.String(), func(t *testing.T) {
			s, addr := startRefuser(t, code)
			_, err := New(addr, WithProtocol(RocketMQ5), WithAttemptTimeout(aclTimeout),
				WithCredentials("app", "s3cret", ""))
			assertRefusal(t, err, "app", "s3cret", code)
			assert.Contains(t, err.Error(), "gateway: who are you")
			assert.Equal(t, int64(1), s.calls.Load(), "Telemetry was not opened again")
		})
	}
}

// TestAuthErrorOfForbidden reads a 40300 answer: both sentinels, and
// PERMISSION_DENIED.
func TestAuthErrorOfForbidden(t *testing.T) {
	t.Parallel()
	err := error(&AuthError{AccessKey: "app", Denied: true, Err: &RocketMQStatusError{Code: 40300, Message: "no"}})
	assertRefusal(t, err, "app", "", codes.PermissionDenied)
	assert.False(t, IsThrottled(err))
}
