package wirermq

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/message"
	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/producer/internal/batch"
	"github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq/rmqtest"
	"github.com/rocketry-go/rocketry/senderr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logBuffer is a log of slog's text lines, safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// unconfirmedAnswer answers a request as a proxy answers the broker's
// FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE: one entry
// with the code and no offset, message ID or transaction ID, the same code
// on top (SendMessageActivity.java convertToSendMessageResponse).
func unconfirmedAnswer(code rocketmqv2.Code) func(*rocketmqv2.SendMessageRequest) *rocketmqv2.SendMessageResponse {
	return func(*rocketmqv2.SendMessageRequest) *rocketmqv2.SendMessageResponse {
		st := &rocketmqv2.Status{Code: code, Message: "send message failed, sendStatus=FLUSH_DISK_TIMEOUT"}
		return &rocketmqv2.SendMessageResponse{Status: st, Entries: []*rocketmqv2.SendResultEntry{{Status: st}}}
	}
}

// unconfirmedTransport is a started transport of srv, which answers every
// send with code, and the log of its client.
func unconfirmedTransport(t *testing.T, code rocketmqv2.Code) (*rmqtest.Server, *Transport, *logBuffer) {
	t.Helper()
	srv := rmqtest.Start(t)
	srv.SetSettings(rmqtest.Settings(0))
	srv.SetRoute("t", rmqtest.QueueOn(t, srv, "t", "broker-a", 3))
	srv.SetAnswer(unconfirmedAnswer(code))
	logs := &logBuffer{}
	c := newTestRMQClient(t, []string{srv.Addr}, func(c *Config) {
		c.Send.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	require.NoError(t, c.start(t.Context()))
	return srv, &Transport{c: c, cfg: c.cfg}, logs
}

var unconfirmedCodes = []rocketmqv2.Code{
	rocketmqv2.Code_HA_NOT_AVAILABLE,
	rocketmqv2.Code_MASTER_PERSISTENCE_TIMEOUT,
	rocketmqv2.Code_SLAVE_PERSISTENCE_TIMEOUT,
}

// TestRmqUnconfirmedIsStored: a send answered with a stored status whose
// flush or replication was not confirmed succeeds after its one attempt,
// with a receipt, and the client warns with the code and the message ID.
func TestRmqUnconfirmedIsStored(t *testing.T) {
	for _, code := range unconfirmedCodes {
		t.Run(code.String(), func(t *testing.T) {
			srv, tr, logs := unconfirmedTransport(t, code)
			m := message.Message{Topic: "t", Body: []byte("x"), ID: tr.c.ids.next()}
			r, f := tr.Send(t.Context(), m, nil, nil)
			require.Nil(t, f)
			require.NotNil(t, r)
			assert.Equal(t, m.ID, r.MessageID)
			assert.Equal(t, 1, r.Attempts, "not sent again")
			assert.Equal(t, int32(3), r.QueueID)
			srv.Seen(func(s *rmqtest.Server) { assert.Len(t, s.Sends, 1) })
			assert.Contains(t, logs.String(), "code="+code.String())
			assert.Contains(t, logs.String(), "message_id="+m.ID)
		})
	}
}

// TestRmqUnconfirmedBatch: in a batch, the one entry a proxy answers is
// every message's: each is stored after one attempt, without an offset.
func TestRmqUnconfirmedBatch(t *testing.T) {
	srv, tr, logs := unconfirmedTransport(t, rocketmqv2.Code_MASTER_PERSISTENCE_TIMEOUT)
	_, err := tr.c.route(t.Context(), "t")
	require.NoError(t, err)
	slots := make(chan struct{}, 8)
	slots <- struct{}{}
	slots <- struct{}{}
	bt := batch.New(batch.Config{Linger: time.Hour, MaxMessages: 2, MaxBytes: 1 << 20}, slots, context.Background())
	type res struct {
		r  *message.Receipt
		id string
		f  *senderr.SendError
	}
	out := make(chan res, 2)
	for range 2 {
		m := message.Message{Topic: "t", Body: []byte("x"), ID: tr.c.ids.next()}
		go func() {
			r, f := tr.Send(t.Context(), m, bt, nil)
			out <- res{r, m.ID, f}
		}()
	}
	for range 2 {
		got := <-out
		require.Nil(t, got.f)
		assert.Equal(t, 1, got.r.Attempts)
		assert.Zero(t, got.r.Offset, "the answer has no offset")
		assert.Contains(t, logs.String(), "message_id="+got.id)
	}
	bt.Close()
	srv.Seen(func(s *rmqtest.Server) {
		require.Len(t, s.Sends, 1)
		assert.Len(t, s.Sends[0].GetMessages(), 2)
	})
}

// TestRmqUnconfirmedHalf: a half message answered so has no transaction
// ID, so its transaction cannot be ended: the send fails unknown after its
// one attempt (the broker's check resolves it), never sent again.
func TestRmqUnconfirmedHalf(t *testing.T) {
	srv, tr, _ := unconfirmedTransport(t, rocketmqv2.Code_SLAVE_PERSISTENCE_TIMEOUT)
	_, _, f := tr.SendHalf(t.Context(), message.Message{Topic: "t", Body: []byte("x"), ID: tr.c.ids.next(), Transactional: true})
	require.NotNil(t, f)
	assert.Equal(t, outcome.FailedUnknown, f.Last)
	assert.Equal(t, int32(rocketmqv2.Code_SLAVE_PERSISTENCE_TIMEOUT), f.WireCode)
	srv.Seen(func(s *rmqtest.Server) { assert.Len(t, s.Sends, 1) })
}
