package wirermq

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/rocketry-go/rocketry/brokercode"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/message"
	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq/rmqtest"
	"github.com/rocketry-go/rocketry/senderr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rmqNoWritableQueueText is the status message of the proxy's "no writable
// queue": GrpcProxyException wraps the ProxyException, whose text is its
// class and message.
const rmqNoWritableQueueText = "org.apache.rocketmq.proxy.common.ProxyException: no writable queue"

// forbiddenTransport is a started transport of a server that answers the
// first `times` sends with 40300 and msg, then stores.
func forbiddenTransport(t *testing.T, msg string, times int32) (*rmqtest.Server, *Transport) {
	t.Helper()
	srv := rmqtest.Start(t)
	srv.SetSettings(rmqtest.Settings(0))
	srv.SetRoute("t", rmqtest.QueueOn(t, srv, "t", "broker-a", 0))
	var n atomic.Int32
	srv.SetAnswer(func(req *rocketmqv2.SendMessageRequest) *rocketmqv2.SendMessageResponse {
		if n.Add(1) <= times {
			return &rocketmqv2.SendMessageResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_FORBIDDEN, Message: msg}}
		}
		st := &rocketmqv2.Status{Code: rocketmqv2.Code_OK}
		return &rocketmqv2.SendMessageResponse{Status: st, Entries: []*rocketmqv2.SendResultEntry{{Status: st, MessageId: req.GetMessages()[0].GetSystemProperties().GetMessageId(), Offset: 7}}}
	})
	c := newTestRMQClient(t, []string{srv.Addr}, func(c *Config) { c.AccessKey, c.SecretKey = "app", "secret" })
	require.NoError(t, c.start(t.Context()))
	return srv, &Transport{c: c, cfg: c.cfg}
}

// TestRmqNoWritableQueueIsRetried: the proxy's 40300 "no writable queue"
// (every broker of the topic has its write permission off) is no refused
// permission: the message is known not stored and sent again, and stored
// once a queue is writable.
func TestRmqNoWritableQueueIsRetried(t *testing.T) {
	o := ClassifyStatus(&rocketmqv2.Status{Code: rocketmqv2.Code_FORBIDDEN, Message: rmqNoWritableQueueText})
	assert.Equal(t, outcome.FailedNotStored, o.Kind)
	assert.Equal(t, brokercode.Unavailable, o.Code)
	assert.Equal(t, int32(40300), o.WireCode)

	srv, tr := forbiddenTransport(t, rmqNoWritableQueueText, 1)
	r, f := tr.Send(t.Context(), message.Message{Topic: "t", Body: []byte("x"), ID: tr.c.ids.next()}, nil, nil)
	require.Nil(t, f)
	assert.Equal(t, 2, r.Attempts)
	assert.Equal(t, int64(7), r.Offset)
	srv.Seen(func(s *rmqtest.Server) { assert.Len(t, s.Sends, 2) })

	// Every attempt refused so: the send fails not stored, not as a
	// refused permission.
	_, tr = forbiddenTransport(t, rmqNoWritableQueueText, 100)
	_, f = tr.Send(t.Context(), message.Message{Topic: "t", Body: []byte("x"), ID: tr.c.ids.next()}, nil, nil)
	require.NotNil(t, f)
	assert.Equal(t, 3, f.Attempts, "every attempt")
	assert.Equal(t, outcome.FailedNotStored, f.Last)
	var ae *senderr.AuthError
	assert.False(t, errors.As(f, &ae), "not an auth error: %v", f)
	var se *senderr.StatusError
	require.ErrorAs(t, f, &se)
	assert.Equal(t, int32(40300), se.Code)
}

// TestRmqForbiddenIsFinal: any other 40300 is a refused permission: one
// attempt, an *AuthError that denies.
func TestRmqForbiddenIsFinal(t *testing.T) {
	srv, tr := forbiddenTransport(t, "User:app has no permission to PUB topic t", 100)
	_, f := tr.Send(t.Context(), message.Message{Topic: "t", Body: []byte("x"), ID: tr.c.ids.next()}, nil, nil)
	require.NotNil(t, f)
	assert.Equal(t, 1, f.Attempts)
	assert.Equal(t, outcome.Permanent, f.Last)
	var ae *senderr.AuthError
	require.ErrorAs(t, f, &ae)
	assert.True(t, ae.Denied)
	assert.Equal(t, "app", ae.AccessKey)
	srv.Seen(func(s *rmqtest.Server) { assert.Len(t, s.Sends, 1) })
}
