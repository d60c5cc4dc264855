package wirermq

import (
	"context"
	"fmt"
	"strings"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/outcome"
	wirev1 "github.com/rocketry-go/rocketry/producer/internal/wire/v1"
	"github.com/rocketry-go/rocketry/senderr"
)

// This file is the implementation of RocketMQ 5's recall (the public API
// is recall.go), as wire.Transactions.

// recallHandle is the recall handle of the stored message, "" when the
// server gave none.
func (a *rmqCall) recallHandle() string { return a.entry().GetRecallHandle() }

// Recall sends RecallMessage for handle in topic, retried as
// EndTransaction is (recall is safe to repeat), on the access points in
// turn. A message due already wraps senderr.ErrRecallTooLate, a handle the server
// refuses senderr.ErrRecallHandle; both wrap the server's *senderr.StatusError.
func (t *Transport) Recall(ctx context.Context, topic, handle string) (string, string, int, error) {
	c := t.c
	req := &rocketmqv2.RecallMessageRequest{Topic: &rocketmqv2.Resource{ResourceNamespace: c.set.Namespace, Name: topic}, RecallHandle: handle}
	var id, at string
	n, err := c.retry(ctx, c.access, func(ctx context.Context, cn *rmqConn) (outcome.Outcome, error) {
		at = cn.addr
		resp, err := cn.stub.RecallMessage(ctx, req)
		if err != nil {
			return wirev1.Classify(err), err
		}
		st := resp.GetStatus()
		if st.GetCode() == rocketmqv2.Code_OK {
			id = resp.GetMessageId()
			return outcome.Outcome{Kind: outcome.Stored}, nil
		}
		serr := &senderr.StatusError{Code: int32(st.GetCode()), Message: st.GetMessage()}
		if st.GetCode() == rocketmqv2.Code_INTERNAL_SERVER_ERROR {
			// The broker's ILLEGAL_OPERATION and the proxy's decoding error
			// (broker/src/main/java/org/apache/rocketmq/broker/processor/RecallMessageProcessor.java,
			// proxy/src/main/java/org/apache/rocketmq/proxy/processor/ProducerProcessor.java).
			if strings.Contains(st.GetMessage(), "timestamp invalid") {
				return outcome.Outcome{Kind: outcome.Permanent}, fmt.Errorf("%w: %w", senderr.ErrRecallTooLate, serr)
			}
			if o := StatusOutcome(serr); o.Kind != outcome.Throttled {
				return outcome.Outcome{Kind: outcome.Permanent}, fmt.Errorf("%w: %w", senderr.ErrRecallHandle, serr)
			}
		}
		return StatusOutcome(serr), serr
	})
	return id, at, n, err
}
