package wirermq

import (
	"context"
	"fmt"
	"log/slog"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/producer/internal/wire"
)

// Resolution is what a Checker says of an orphaned transaction: the
// values of producer.TransactionResolution.
type Resolution int

const (
	Unknown  Resolution = iota // left open: the broker asks again
	Commit                     // committed: its message is delivered
	Rollback                   // rolled back: its message is dropped
)

// String is producer.TransactionResolution's.
func (r Resolution) String() string {
	switch r {
	case Unknown:
		return "UNKNOWN"
	case Commit:
		return "COMMIT"
	case Rollback:
		return "ROLLBACK"
	}
	return fmt.Sprintf("TransactionResolution(%d)", int(r))
}

// Checker is producer.TransactionChecker below the public API: it says
// whether the transaction of a half message m is to be committed or rolled
// back. ctx ends when the client stops.
type Checker func(ctx context.Context, m wire.Message) Resolution

// recoverOrphan answers the server's question about an orphaned
// transaction, in its own goroutine: the checker's resolution, sent back
// with EndTransaction (source SOURCE_SERVER_CHECK) on the connection that
// asked. Without a checker, or when it says Unknown, nothing is
// sent: the server asks again.
func (c *rmqClient) recoverOrphan(cn *rmqConn, cmd *rocketmqv2.RecoverOrphanedTransactionCommand) {
	m := fromRMQ(cmd.GetMessage())
	check := c.set.Checker
	if check == nil {
		c.logger.Warn("rocketmq: orphaned transaction left to the server: no transaction checker (WithTransactionChecker)",
			"endpoint", cn.addr, "transaction_id", cmd.GetTransactionId(), "message_id", m.ID)
		return
	}
	c.wg.Add(1) // the telemetry goroutine is counted: the count is not 0
	go func() {
		defer c.wg.Done()
		res := c.runChecker(check, m)
		var r rocketmqv2.TransactionResolution
		switch res {
		case Commit:
			r = rocketmqv2.TransactionResolution_COMMIT
		case Rollback:
			r = rocketmqv2.TransactionResolution_ROLLBACK
		default:
			c.logger.Debug("rocketmq: orphaned transaction left open by the checker", "transaction_id", cmd.GetTransactionId(), "message_id", m.ID)
			return
		}
		h := wire.Half{MsgID: m.ID, TxID: cmd.GetTransactionId(), Topic: m.Topic, Addr: cn.addr}
		n, err := c.endTransaction(c.ctx, h, r, rocketmqv2.TransactionSource_SOURCE_SERVER_CHECK)
		if c.checked != nil {
			c.checked(c.ctx, Checked{Commit: res == Commit, MessageID: m.ID, Attempts: n, Endpoint: cn.addr, Err: err})
		}
		if err != nil {
			lvl := slog.LevelWarn
			if c.ctx.Err() != nil {
				lvl = slog.LevelDebug
			}
			c.logger.Log(c.ctx, lvl, "rocketmq: answer to the server's transaction check failed; it asks again",
				"endpoint", cn.addr, "transaction_id", h.TxID, "message_id", m.ID, "resolution", res.String(), "err", err)
		}
	}()
}

// runChecker calls check, a panic read as Unknown.
func (c *rmqClient) runChecker(check Checker, m wire.Message) (res Resolution) {
	defer func() {
		if r := recover(); r != nil {
			c.logger.Error("rocketmq: transaction checker panicked; transaction left open", "message_id", m.ID, "panic", fmt.Sprint(r))
			res = Unknown
		}
	}()
	return check(c.ctx, m)
}

// fromRMQ converts a v2 message the server sent (a half message) to a
// wire.Message: id, topic, tag, keys, properties and body, Transactional
// set.
func fromRMQ(v *rocketmqv2.Message) wire.Message {
	sp := v.GetSystemProperties()
	m := wire.Message{
		ID:            sp.GetMessageId(),
		Topic:         v.GetTopic().GetName(),
		Tag:           sp.GetTag(),
		Keys:          sp.GetKeys(),
		Properties:    v.GetUserProperties(),
		Body:          v.GetBody(),
		Transactional: true,
	}
	return m
}
