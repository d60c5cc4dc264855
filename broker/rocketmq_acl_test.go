package broker_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
)

// signed is ctx with the metadata of a call signed as the official
// clients sign it; secret "" leaves the authorization header out, and
// header, when not "", replaces it.
func signed(ctx context.Context, ak, secret, header string) context.Context {
	dt := time.Now().UTC().Format("20060102T150405Z")
	kv := []string{"x-mq-date-time", dt, "x-mq-client-id", "acl-test"}
	if secret != "" {
		h := hmac.New(sha1.New, []byte(secret))
		h.Write([]byte(dt))
		header = "MQv2-HMAC-SHA1 Credential=" + ak + ", SignedHeaders=x-mq-date-time, Signature=" + strings.ToUpper(hex.EncodeToString(h.Sum(nil)))
	}
	if header != "" {
		kv = append(kv, "authorization", header)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

func TestRocketMQACLUnary(t *testing.T) {
	b := brokertest.Start(t, broker.WithACL(map[string]string{"app": "secret"}))
	c := dialV2(t, b.Addr())
	topic := &rocketmqv2.Resource{Name: "t"}
	cases := []struct {
		name, ak, secret, header, want string
	}{
		{name: "unsigned", want: "authentication header is null"},
		{name: "unknown key", ak: "who", secret: "secret", want: "User:who is not found."},
		{name: "wrong secret", ak: "app", secret: "guess", want: "check signature failed."},
		{name: "no credential", header: "MQv2-HMAC-SHA1 SignedHeaders=x-mq-date-time, Signature=00", want: "username cannot be null."},
		{name: "malformed", header: "MQv2-HMAC-SHA1", want: "authentication header is incorrect"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := signed(t.Context(), tc.ak, tc.secret, tc.header)
			resp, err := c.QueryRoute(ctx, &rocketmqv2.QueryRouteRequest{Topic: topic})
			require.NoError(t, err, "the gRPC call is OK; the refusal is its body status")
			assert.Equal(t, rocketmqv2.Code_UNAUTHORIZED, resp.GetStatus().GetCode())
			assert.Equal(t, tc.want, resp.GetStatus().GetMessage())
			assert.Empty(t, resp.GetMessageQueues())
			assert.Equal(t, int64(i+1), b.AuthRefused("QueryRoute"))
		})
	}
	ctx := signed(t.Context(), "app", "secret", "")
	resp, err := c.QueryRoute(ctx, &rocketmqv2.QueryRouteRequest{Topic: topic})
	require.NoError(t, err)
	assert.Equal(t, rocketmqv2.Code_OK, resp.GetStatus().GetCode())
	send, err := c.SendMessage(signed(t.Context(), "app", "bad", ""), &rocketmqv2.SendMessageRequest{Messages: []*rocketmqv2.Message{v2msg("t", "m1")}})
	require.NoError(t, err)
	assert.Equal(t, rocketmqv2.Code_UNAUTHORIZED, send.GetStatus().GetCode())
	assert.Zero(t, b.Stats().Stored, "a refused send stores nothing")
	assert.Equal(t, int64(len(cases)+1), b.AuthRefused(""))

	// Revoked at run time, then off.
	b.SetACL(map[string]string{})
	resp, err = c.QueryRoute(ctx, &rocketmqv2.QueryRouteRequest{Topic: topic})
	require.NoError(t, err)
	assert.Equal(t, rocketmqv2.Code_UNAUTHORIZED, resp.GetStatus().GetCode())
	b.SetACL(nil)
	resp, err = c.QueryRoute(t.Context(), &rocketmqv2.QueryRouteRequest{Topic: topic})
	require.NoError(t, err)
	assert.Equal(t, rocketmqv2.Code_OK, resp.GetStatus().GetCode(), "ACL off: unsigned calls pass")
}

func TestRocketMQACLTelemetry(t *testing.T) {
	b := brokertest.Start(t, broker.WithACL(map[string]string{"app": "secret"}))
	c := dialV2(t, b.Addr())
	settings := &rocketmqv2.TelemetryCommand{Command: &rocketmqv2.TelemetryCommand_Settings{Settings: &rocketmqv2.Settings{
		ClientType:     rocketmqv2.ClientType_PRODUCER.Enum(),
		RequestTimeout: durationpb.New(time.Second),
	}}}

	// Refused: the status alone, then the stream's end, gRPC OK.
	stream, err := c.Telemetry(signed(t.Context(), "app", "wrong", ""))
	require.NoError(t, err)
	require.NoError(t, stream.Send(settings))
	got, err := stream.Recv()
	require.NoError(t, err)
	assert.Equal(t, rocketmqv2.Code_UNAUTHORIZED, got.GetStatus().GetCode())
	assert.Nil(t, got.GetCommand(), "no Settings")
	_, err = stream.Recv()
	assert.ErrorIs(t, err, io.EOF, "the stream is completed")
	assert.Equal(t, int64(1), b.AuthRefused("Telemetry"))

	// Signed right: the broker's Settings.
	stream, err = c.Telemetry(signed(t.Context(), "app", "secret", ""))
	require.NoError(t, err)
	require.NoError(t, stream.Send(settings))
	got, err = stream.Recv()
	require.NoError(t, err)
	assert.Equal(t, rocketmqv2.Code_OK, got.GetStatus().GetCode())
	assert.NotNil(t, got.GetSettings())
	require.NoError(t, stream.CloseSend())
	_, err = stream.Recv()
	assert.ErrorIs(t, err, io.EOF)
	assert.Equal(t, int64(1), b.AuthRefused(""))
}

func TestRocketMQACLReceive(t *testing.T) {
	b := brokertest.Start(t, broker.WithACL(map[string]string{"app": "secret"}))
	c := dialV2(t, b.Addr())
	stream, err := c.ReceiveMessage(t.Context(), &rocketmqv2.ReceiveMessageRequest{
		Group:        &rocketmqv2.Resource{Name: "g"},
		MessageQueue: &rocketmqv2.MessageQueue{Topic: &rocketmqv2.Resource{Name: "t"}},
	})
	require.NoError(t, err)
	got, err := stream.Recv()
	require.NoError(t, err)
	assert.Equal(t, rocketmqv2.Code_UNAUTHORIZED, got.GetStatus().GetCode())
	assert.Equal(t, int64(1), b.AuthRefused("ReceiveMessage"))
}

func TestWithACLRejectsEmptyAccessKey(t *testing.T) {
	_, err := broker.New(broker.WithACL(map[string]string{"": "x"}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "WithACL")
}
