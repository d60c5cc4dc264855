package wirermq

import (
	"context"
	"fmt"
	"strings"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/message"
	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/producer/internal/clock"
	"github.com/rocketry-go/rocketry/producer/internal/send"
	"github.com/rocketry-go/rocketry/producer/internal/wire"
	wirev1 "github.com/rocketry-go/rocketry/producer/internal/wire/v1"
	"github.com/rocketry-go/rocketry/senderr"
)

// This file is the implementation of RocketMQ 5's transactions (the
// public API is producer's transaction.go): a half message's send, EndTransaction
// and its retries (which Recall's share), as wire.Transactions.

var _ wire.Transactions = (*Transport)(nil)

// SendHalf sends the prepared half message m: the executor's rule of a
// transactional message (retried only while known not stored), first
// attempts round robin over the queues of the topic's route.
func (t *Transport) SendHalf(ctx context.Context, m message.Message) (*message.Receipt, string, *senderr.SendError) {
	c := t.c.newWireCall(m)
	c.x.Init(t.cfg, c, send.Facts{ID: m.ID, EP: int(t.next.Add(1)), Transactional: true, Half: true})
	if f := wire.Run(ctx, &c.x); f != nil {
		return nil, "", f
	}
	q, off, txID, _ := c.result()
	return &message.Receipt{MessageID: m.ID, QueueID: q, Offset: off, Attempts: c.x.Attempts(), TransactionID: txID}, c.cn.addr, nil
}

// EndTransaction ends h's transaction: COMMIT or ROLLBACK, from the
// client (SOURCE_CLIENT).
func (t *Transport) EndTransaction(ctx context.Context, h wire.Half, commit bool) (int, error) {
	res := rocketmqv2.TransactionResolution_ROLLBACK
	if commit {
		res = rocketmqv2.TransactionResolution_COMMIT
	}
	return t.c.endTransaction(ctx, h, res, rocketmqv2.TransactionSource_SOURCE_CLIENT)
}

// entry is the SendResultEntry of the stored message; nil before one.
func (a *rmqCall) entry() *rocketmqv2.SendResultEntry {
	if es := a.resp.GetEntries(); len(es) > 0 {
		return es[0]
	}
	if a.resp == nil && a.be != nil {
		return a.be.Msg.res // stored in its batch
	}
	return nil
}

// endTransaction ends the transaction of h with res, retrying failures
// with the producer's attempts and failure schedule within ctx; it returns
// the attempts made. An answer that the transaction is not found wraps
// senderr.ErrTransactionNotFound.
func (c *rmqClient) endTransaction(ctx context.Context, h wire.Half, res rocketmqv2.TransactionResolution, src rocketmqv2.TransactionSource) (int, error) {
	req := &rocketmqv2.EndTransactionRequest{
		Topic:         &rocketmqv2.Resource{ResourceNamespace: c.set.Namespace, Name: h.Topic},
		MessageId:     h.MsgID,
		TransactionId: h.TxID,
		Resolution:    res,
		Source:        src,
	}
	lostBefore := false // an earlier attempt's outcome was unknown
	return c.retry(ctx, []string{h.Addr}, func(ctx context.Context, cn *rmqConn) (outcome.Outcome, error) {
		resp, err := cn.stub.EndTransaction(ctx, req)
		if err != nil {
			o := wirev1.Classify(err)
			lostBefore = lostBefore || o.Kind == outcome.FailedUnknown
			return o, err
		}
		st := resp.GetStatus()
		if st.GetCode() == rocketmqv2.Code_OK {
			return outcome.Outcome{Kind: outcome.Stored}, nil
		}
		serr := &senderr.StatusError{Code: int32(st.GetCode()), Message: st.GetMessage()}
		if st.GetCode() == rocketmqv2.Code_INTERNAL_SERVER_ERROR && strings.Contains(st.GetMessage(), "transaction data") {
			// The proxy's TRANSACTION_DATA_NOT_FOUND ("cannot found transaction data").
			note := ""
			if lostBefore {
				note = " (an earlier attempt's answer was lost: it may have ended it)"
			}
			return outcome.Outcome{Kind: outcome.Permanent}, fmt.Errorf("%w%s: %w", senderr.ErrTransactionNotFound, note, serr)
		}
		o := StatusOutcome(serr)
		lostBefore = lostBefore || o.Kind == outcome.FailedUnknown
		return o, serr
	})
}

// retry makes call on the connection to addrs[0] (the next address after a
// failure known not to have reached the server), until it answers Stored
// or Permanent, the attempts are spent (the producer's MaxAttempts), the
// failure schedule has no more retries, or ctx ends; each attempt within
// the attempt timeout. It returns the attempts made and the last error.
func (c *rmqClient) retry(ctx context.Context, addrs []string, call func(context.Context, *rmqConn) (outcome.Outcome, error)) (int, error) {
	cfg := c.cfg
	ai := 0
	for n := 1; ; n++ {
		cn, err := c.conn(addrs[ai%len(addrs)])
		if err != nil {
			return n - 1, err
		}
		actx, cancel := context.WithTimeout(c.outgoing(ctx), cfg.AttemptTimeout)
		o, err := call(actx, cn)
		cancel()
		switch {
		case o.Kind == outcome.Stored:
			return n, nil
		case o.Kind == outcome.Permanent:
			return n, err
		case ctx.Err() != nil:
			return n, fmt.Errorf("%w (last attempt: %w)", context.Cause(ctx), err)
		case n >= cfg.MaxAttempts:
			return n, fmt.Errorf("%w: %w", senderr.ErrAttemptsExhausted, err)
		}
		if o.Kind == outcome.FailedNotStored {
			ai++
		}
		d, ok := cfg.Failure.Delay(n, cfg.Rand)
		if !ok {
			return n, fmt.Errorf("%w: %w", senderr.ErrAttemptsExhausted, err)
		}
		if !clock.Or(cfg.Clock).Sleep(ctx, d) {
			return n, fmt.Errorf("%w (last attempt: %w)", context.Cause(ctx), err)
		}
	}
}
