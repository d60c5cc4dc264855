package producer

import (
	"context"
	"errors"
	"fmt"
	"strings"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/apache/rocketmq/v2"
	"github.com/rocketry-go/rocketry/producer/internal/send"
	wirermq "github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq"
	wirev1 "github.com/rocketry-go/rocketry/producer/internal/wire/v1"
)

// ErrRecallTooLate is wrapped by Recall's error when the message is due
// already (delivered, or about to be): the server refused the recall.
var ErrRecallTooLate = errors.New("producer: too late to recall: the message is due")

// ErrRecallHandle is wrapped by Recall's error when the server refused the
// handle as invalid: malformed, of another topic, or of another broker.
var ErrRecallHandle = errors.New("producer: invalid recall handle")

// recallHandle is the recall handle of the stored message, "" when the
// server gave none.
func (a *rmqCall) recallHandle() string { return a.entry().GetRecallHandle() }

// Recall removes a timed message (Message.DeliveryTime) before its
// delivery time, named by the RecallHandle of its receipt, so that it is
// never delivered; it returns the message's id. RocketMQ 5 only
// (ErrNotRocketMQ5). A message due already (delivered, or about to be) is
// ErrRecallTooLate; a handle the server refuses (malformed, of another
// topic or broker) ErrRecallHandle; both wrap the server's
// *RocketMQStatusError. A handle of a message recalled already is
// answered as a success again, as the broker does. Transport failures and
// throttling are retried as EndTransaction is (recall is safe to repeat),
// on the access points in turn.
func (p *Producer) Recall(ctx context.Context, topic, handle string) (string, error) {
	rt, ok := rmqOf(p) // RocketMQ 5 only: the client by a type assertion on the transport
	if !ok {
		return "", fmt.Errorf("%w: Recall: rocketry.v1 has no recall", ErrNotRocketMQ5)
	}
	switch {
	case strings.TrimSpace(topic) == "":
		return "", errors.New("producer: Recall: topic is empty")
	case strings.TrimSpace(handle) == "":
		return "", fmt.Errorf("%w: Recall: recall handle is empty (a receipt's RecallHandle: only a timed message has one)", ErrRecallHandle)
	}
	select {
	case <-p.closing:
		return "", ErrClosed
	default:
	}
	c := rt.c
	req := &rocketmqv2.RecallMessageRequest{Topic: &rocketmqv2.Resource{ResourceNamespace: c.set.namespace, Name: topic}, RecallHandle: handle}
	var id, at string
	n, err := c.retry(ctx, c.access, func(ctx context.Context, cn *rmqConn) (send.Outcome, error) {
		at = cn.addr
		resp, err := cn.stub.RecallMessage(ctx, req)
		if err != nil {
			return wirev1.Classify(err), err
		}
		st := resp.GetStatus()
		if st.GetCode() == rocketmqv2.Code_OK {
			id = resp.GetMessageId()
			return send.Outcome{Kind: send.Stored}, nil
		}
		serr := &wirermq.StatusError{Code: int32(st.GetCode()), Message: st.GetMessage()}
		if st.GetCode() == rocketmqv2.Code_INTERNAL_SERVER_ERROR {
			// The broker's ILLEGAL_OPERATION and the proxy's decoding error
			// (broker/src/main/java/org/apache/rocketmq/broker/processor/RecallMessageProcessor.java,
			// proxy/src/main/java/org/apache/rocketmq/proxy/processor/ProducerProcessor.java).
			if strings.Contains(st.GetMessage(), "timestamp invalid") {
				return send.Outcome{Kind: send.Permanent}, fmt.Errorf("%w: %w", wirermq.ErrRecallTooLate, serr)
			}
			if o := serr.Outcome(); o.Kind != send.Throttled {
				return send.Outcome{Kind: send.Permanent}, fmt.Errorf("%w: %w", wirermq.ErrRecallHandle, serr)
			}
		}
		return serr.Outcome(), serr
	})
	if err != nil {
		err = publicError(fmt.Errorf("producer: Recall(%q): %w", topic, err))
	}
	if p.cfg.watched() {
		p.cfg.emit(ctx, Event{Kind: EventRecall, MessageID: id, Attempt: n, Endpoint: at, Err: err})
	}
	if err != nil {
		return "", err
	}
	return id, nil
}
