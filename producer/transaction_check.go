package producer

import (
	"fmt"
	"log/slog"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/apache/rocketmq/v2"
	"github.com/rocketry-go/rocketry/producer/internal/wire"
)

// recoverOrphan answers the server's question about an orphaned
// transaction, in its own goroutine: the checker's resolution, sent back
// with EndTransaction (source SOURCE_SERVER_CHECK) on the connection that
// asked. Without a checker, or when it says TransactionUnknown, nothing is
// sent: the server asks again.
func (c *rmqClient) recoverOrphan(cn *rmqConn, cmd *rocketmqv2.RecoverOrphanedTransactionCommand) {
	m := fromRMQ(cmd.GetMessage())
	check := c.set.txChecker
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
		case TransactionCommit:
			r = rocketmqv2.TransactionResolution_COMMIT
		case TransactionRollback:
			r = rocketmqv2.TransactionResolution_ROLLBACK
		default:
			c.logger.Debug("rocketmq: orphaned transaction left open by the checker", "transaction_id", cmd.GetTransactionId(), "message_id", m.ID)
			return
		}
		h := wire.Half{MsgID: m.ID, TxID: cmd.GetTransactionId(), Topic: m.Topic, Addr: cn.addr}
		n, err := c.endTransaction(c.ctx, h, r, rocketmqv2.TransactionSource_SOURCE_SERVER_CHECK)
		if c.cfg.watched() {
			kind := EventCommit
			if res == TransactionRollback {
				kind = EventRollback
			}
			c.cfg.emit(c.ctx, Event{Kind: kind, MessageID: m.ID, Attempt: n, Endpoint: cn.addr, Err: publicError(err), Check: true})
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

// runChecker calls check, a panic read as TransactionUnknown.
func (c *rmqClient) runChecker(check TransactionChecker, m *Message) (res TransactionResolution) {
	defer func() {
		if r := recover(); r != nil {
			c.logger.Error("rocketmq: transaction checker panicked; transaction left open", "message_id", m.ID, "panic", fmt.Sprint(r))
			res = TransactionUnknown
		}
	}()
	return check(c.ctx, m)
}

// fromRMQ converts a v2 message the server sent (a half message) to a
// Message: id, topic, tag, keys, properties and body, Transactional set.
func fromRMQ(v *rocketmqv2.Message) *Message {
	sp := v.GetSystemProperties()
	m := &Message{
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
