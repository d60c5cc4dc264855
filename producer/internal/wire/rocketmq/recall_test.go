package wirermq

import (
	"errors"
	"sync/atomic"
	"testing"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq/rmqtest"
	"github.com/rocketry-go/rocketry/senderr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRmqRecallAnswers: of the proxy's 50001 answers to RecallMessage,
// the broker's texts of a handle due already, of a bad handle and of
// recall switched off end the recall after one attempt; the others (a
// broker unavailable, a failed write, anything else) are retried, and a
// recall that then succeeds returns the message ID.
func TestRmqRecallAnswers(t *testing.T) {
	for _, tc := range []struct {
		msg      string
		failures int32 // answers of msg before OK
		attempts int
		sentinel error // nil: the recall succeeds, or fails without one
		final    bool
	}{
		{"recall failed, timestamp invalid", 100, 1, senderr.ErrRecallTooLate, true},
		{"recall handle is invalid", 100, 1, senderr.ErrRecallHandle, true},
		{"recall failed, topic not match", 100, 1, senderr.ErrRecallHandle, true},
		{"recall failed, operation is forbidden", 100, 1, nil, true},
		{"recall failed, broker service not available", 1, 2, nil, false},
		{"recall failed, execute error", 2, 3, nil, false},
		{"java.lang.NullPointerException", 1, 2, nil, false},
		{"recall failed, broker service not available", 100, 3, nil, false},
	} {
		t.Run(tc.msg, func(t *testing.T) {
			srv := rmqtest.Start(t)
			srv.SetSettings(rmqtest.Settings(0))
			var n atomic.Int32
			srv.SetRecallAnswer(func(*rocketmqv2.RecallMessageRequest) *rocketmqv2.RecallMessageResponse {
				if n.Add(1) <= tc.failures {
					return &rocketmqv2.RecallMessageResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_INTERNAL_SERVER_ERROR, Message: tc.msg}}
				}
				return &rocketmqv2.RecallMessageResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_OK}, MessageId: "m1"}
			})
			c := newTestRMQClient(t, []string{srv.Addr})
			require.NoError(t, c.start(t.Context()))
			tr := &Transport{c: c, cfg: c.cfg}

			id, at, attempts, err := tr.Recall(t.Context(), "t", "aGFuZGxl")
			assert.Equal(t, tc.attempts, attempts)
			assert.Equal(t, srv.Addr, at)
			srv.Seen(func(s *rmqtest.Server) { assert.Len(t, s.Recalls, tc.attempts) })
			if tc.failures < int32(tc.attempts) {
				require.NoError(t, err)
				assert.Equal(t, "m1", id)
				return
			}
			require.Error(t, err)
			var se *senderr.StatusError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, tc.msg, se.Message)
			if tc.sentinel != nil {
				assert.ErrorIs(t, err, tc.sentinel)
			}
			for _, s := range []error{senderr.ErrRecallTooLate, senderr.ErrRecallHandle} {
				if s != tc.sentinel {
					assert.False(t, errors.Is(err, s), "%v", err)
				}
			}
			assert.Equal(t, !tc.final, errors.Is(err, senderr.ErrAttemptsExhausted), "%v", err)
		})
	}
}
