package wirermq

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/message"
	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq/rmqtest"
	"github.com/rocketry-go/rocketry/senderr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRmqMessageID pins the v1 message ID format: "01", 6 bytes of MAC,
// the pid's low 2 bytes, seconds since 2021-01-01 UTC, a sequence number;
// 34 upper-case hex digits.
func TestRmqMessageID(t *testing.T) {
	g := newRMQIDGen()
	g.now = func() time.Time { return time.Date(2021, 1, 2, 0, 0, 10, 0, time.UTC) }
	a, b := g.next(), g.next()
	for _, id := range []string{a, b} {
		assert.Regexp(t, `^01[0-9A-F]{32}$`, id)
	}
	raw, err := hex.DecodeString(a[2:])
	require.NoError(t, err)
	assert.Equal(t, uint16(os.Getpid()), binary.BigEndian.Uint16(raw[6:8]), "pid")
	assert.Equal(t, uint32(86400+10), binary.BigEndian.Uint32(raw[8:12]), "seconds since 2021-01-01")
	assert.Equal(t, uint32(0), binary.BigEndian.Uint32(raw[12:16]), "first sequence number")
	rawB, _ := hex.DecodeString(b[2:])
	assert.Equal(t, uint32(1), binary.BigEndian.Uint32(rawB[12:16]), "sequence number")
	assert.Equal(t, a[:18], b[:18], "same process, same prefix")
}

// TestRmqMessageIDsOfTwoClients: the clients of one process share the
// prefix of their IDs (MAC and pid), so they share the sequence too: two
// producers that each make IDs never make the same one.
func TestRmqMessageIDsOfTwoClients(t *testing.T) {
	a, err := newRMQClient([]string{"127.0.0.1:1"}, testConfig())
	require.NoError(t, err)
	b, err := newRMQClient([]string{"127.0.0.1:1"}, testConfig())
	require.NoError(t, err)
	seen := make(map[string]bool)
	for range 100 {
		for _, c := range []*rmqClient{a, b} {
			id := c.ids.next()
			require.False(t, seen[id], "ID %s made twice", id)
			seen[id] = true
		}
	}
}

// TestRmqClientID: host@pid@index@start (base 36 microseconds), the index
// counting the clients of the process.
func TestRmqClientID(t *testing.T) {
	now := time.UnixMicro(1_700_000_000_000_000)
	a, b := newRMQClientID(now), newRMQClientID(now)
	host, _ := os.Hostname()
	pa, pb := strings.Split(a, "@"), strings.Split(b, "@")
	require.Len(t, pa, 4)
	require.Len(t, pb, 4)
	assert.Equal(t, host, pa[0])
	assert.Equal(t, strconv.Itoa(os.Getpid()), pa[1])
	ia, _ := strconv.Atoi(pa[2])
	ib, _ := strconv.Atoi(pb[2])
	assert.Equal(t, ia+1, ib)
	assert.Equal(t, strconv.FormatInt(now.UnixMicro(), 36), pa[3])
}

func TestRmqBodyDigest(t *testing.T) {
	// CRC32 (IEEE) of "hello" is 0x3610A686; of "m21" 0x03E0D52A, written
	// without its leading zero as the Java client writes it.
	assert.Equal(t, "3610A686", rmqBodyDigest([]byte("hello")).GetChecksum())
	assert.Equal(t, "3E0D52A", rmqBodyDigest([]byte("m21")).GetChecksum())
	assert.Equal(t, rocketmqv2.DigestType_CRC32, rmqBodyDigest(nil).GetType())
}

func TestRmqToMessage(t *testing.T) {
	born := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	m := &message.Message{ID: "01ABC", Topic: "orders", Tag: "paid", Keys: []string{"k1", "k2"},
		Properties: map[string]string{"p": "v"}, Body: []byte("hello")}
	w := toRMQ(m, "ns", "10.1.2.3", born)
	assert.Equal(t, "orders", w.GetTopic().GetName())
	assert.Equal(t, "ns", w.GetTopic().GetResourceNamespace())
	assert.Equal(t, map[string]string{"p": "v"}, w.GetUserProperties())
	assert.Equal(t, []byte("hello"), w.GetBody())
	sp := w.GetSystemProperties()
	assert.Equal(t, "paid", sp.GetTag())
	assert.Equal(t, []string{"k1", "k2"}, sp.GetKeys())
	assert.Equal(t, "01ABC", sp.GetMessageId())
	assert.Equal(t, "3610A686", sp.GetBodyDigest().GetChecksum())
	assert.Equal(t, rocketmqv2.Encoding_IDENTITY, sp.GetBodyEncoding())
	assert.Equal(t, rocketmqv2.MessageType_NORMAL, sp.GetMessageType())
	assert.Equal(t, born, sp.GetBornTimestamp().AsTime())
	assert.Equal(t, "10.1.2.3", sp.GetBornHost())

	tx := toRMQ(&message.Message{ID: "x", Topic: "t", Transactional: true}, "", "h", born)
	assert.Equal(t, rocketmqv2.MessageType_TRANSACTION, tx.GetSystemProperties().GetMessageType())
	assert.Nil(t, tx.GetSystemProperties().Tag, "no tag: field absent")
}

// TestRmqSendAttempt sends one message end to end and reads the result.
func TestRmqSendAttempt(t *testing.T) {
	srv := rmqtest.Start(t)
	srv.SetSettings(rmqtest.Settings(0))
	srv.SetRoute("orders", rmqtest.QueueOn(t, srv, "orders", "broker-a", 3))
	c := newTestRMQClient(t, []string{srv.Addr}, func(c *Config) { c.Namespace = "ns" })
	require.NoError(t, c.start(context.Background()))

	m := &message.Message{ID: c.ids.next(), Topic: "orders", Tag: "t", Body: []byte("hello"), Transactional: true}
	call := c.newCall(m)
	o, unsent := call.attempt(context.Background(), 0, true, time.Time{})
	require.Equal(t, outcome.Stored, o.Kind, "%v", o.Err)
	assert.False(t, unsent)
	q, off, _, ok := call.result()
	assert.True(t, ok)
	assert.Equal(t, int32(3), q)
	assert.Equal(t, int64(100), off)

	srv.Seen(func(s *rmqtest.Server) {
		require.Len(t, s.Sends, 1)
		w := s.Sends[0].GetMessages()[0]
		assert.Equal(t, "ns", w.GetTopic().GetResourceNamespace())
		assert.Equal(t, m.ID, w.GetSystemProperties().GetMessageId())
		assert.Equal(t, int32(3), w.GetSystemProperties().GetQueueId())
		assert.Equal(t, rocketmqv2.MessageType_TRANSACTION, w.GetSystemProperties().GetMessageType())
		assert.NotEmpty(t, w.GetSystemProperties().GetBornHost())
	})

	// A throttled answer: Throttled, with the reason; the request was sent.
	srv.SetAnswer(func(*rocketmqv2.SendMessageRequest) *rocketmqv2.SendMessageResponse {
		return &rocketmqv2.SendMessageResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_TOO_MANY_REQUESTS, Message: "STORAGE_LOAD"}}
	})
	o, unsent = call.attempt(context.Background(), 0, false, time.Time{})
	assert.Equal(t, outcome.Throttled, o.Kind)
	assert.False(t, unsent)
	var se *senderr.StatusError
	require.True(t, errors.As(o.Err, &se))
	assert.Equal(t, int32(42900), se.Code)
	_, _, _, ok = call.result()
	assert.False(t, ok, "no entry in a throttled answer")
}

// TestRmqTLS: WithTLS makes the connections use TLS: a plaintext server
// fails the handshake, so start fails.
func TestRmqTLS(t *testing.T) {
	srv := rmqtest.Start(t)
	srv.SetSettings(rmqtest.Settings(0))
	c := newTestRMQClient(t, []string{srv.Addr}, func(c *Config) { c.TLS = &tls.Config{ServerName: "x"} }, func(c *Config) { c.Send.AttemptTimeout = 300 * time.Millisecond })
	err := c.start(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no Settings")
}

// TestToRMQTraceContext: a message's traceparent also goes to RocketMQ 5's
// trace_context.
func TestToRMQTraceContext(t *testing.T) {
	tp := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	w := toRMQ(&message.Message{ID: "x", Topic: "t", Properties: map[string]string{traceParentProperty: tp}}, "", "h", time.Now())
	assert.Equal(t, tp, w.GetSystemProperties().GetTraceContext())
	assert.Equal(t, tp, w.GetUserProperties()[traceParentProperty])
	w = toRMQ(&message.Message{ID: "x", Topic: "t"}, "", "h", time.Now())
	assert.Nil(t, w.GetSystemProperties().TraceContext)
}
