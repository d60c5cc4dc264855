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
// turn. A message due already wraps senderr.ErrRecallTooLate, a handle the
// server refuses senderr.ErrRecallHandle (rmqRecallRefusal); both wrap the
// server's *senderr.StatusError.
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
			if final, sentinel := rmqRecallRefusal(st.GetMessage()); final {
				if sentinel == nil {
					return outcome.Outcome{Kind: outcome.Permanent}, serr
				}
				return outcome.Outcome{Kind: outcome.Permanent}, fmt.Errorf("%w: %w", sentinel, serr)
			}
		}
		return StatusOutcome(serr), serr
	})
	return id, at, n, err
}

// rmqRecallRefusal reads the message of a 50001 answer to RecallMessage:
// final when it is a refusal that no retry changes, with the sentinel it
// wraps (nil: none). A proxy answers every refusal of its broker as 50001
// with the broker's remark
// (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/common/ResponseBuilder.java
// buildCode: a code it does not map is INTERNAL_SERVER_ERROR), and a
// handle it cannot decode as 50001 too
// (proxy/src/main/java/org/apache/rocketmq/proxy/processor/ProducerProcessor.java
// recallMessage). The broker's answers
// (broker/src/main/java/org/apache/rocketmq/broker/processor/RecallMessageProcessor.java):
//
//	"recall failed, timestamp invalid"       ILLEGAL_OPERATION: the message
//	                                         is due already: ErrRecallTooLate
//	"recall handle is invalid"               the handle does not decode
//	                                         (common/src/main/java/org/apache/rocketmq/common/producer/RecallMessageHandle.java
//	                                         decodeHandle): ErrRecallHandle
//	"recall failed, topic not match"         ILLEGAL_OPERATION: the handle is
//	                                         of another topic: ErrRecallHandle
//	"recall failed, operation is forbidden"  NO_PERMISSION: the broker's
//	                                         recallMessageEnable is off: final
//	"recall failed, broker service not available"
//	                                         SLAVE_NOT_AVAILABLE or
//	                                         SERVICE_NOT_AVAILABLE (a replica,
//	                                         a broker starting or not
//	                                         writable), and ILLEGAL_OPERATION
//	                                         for a handle of another broker,
//	                                         which the proxy's 50001 cannot
//	                                         tell apart: retried
//	"recall failed, execute error"           SYSTEM_ERROR: the store failed
//	                                         to write the recall: retried
//
// Any other 50001 (an exception of the proxy, a broker unreachable) is
// read as every 50001 is (ClassifyCode): unknown, retried.
func rmqRecallRefusal(msg string) (final bool, sentinel error) {
	switch {
	case strings.Contains(msg, "timestamp invalid"):
		return true, senderr.ErrRecallTooLate
	case strings.Contains(msg, "recall handle is invalid"), strings.Contains(msg, "topic not match"):
		return true, senderr.ErrRecallHandle
	case strings.Contains(msg, "operation is forbidden"):
		return true, nil
	}
	return false, nil
}
