package wirermq

import (
	"context"
	"fmt"
	"log/slog"
	"maps"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/message"
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
// back; info is what the server said of it apart from the message as sent.
// ctx ends when the client stops.
type Checker func(ctx context.Context, m message.Message, info CheckInfo) Resolution

// CheckInfo is producer.TransactionCheck below the public API.
type CheckInfo struct {
	TransactionID string
	System        map[string]string // the broker's properties, taken out of the user properties
}

// brokerProperties are the properties a RocketMQ broker adds to a message
// it stores, which a proxy may hand back among the user properties: the
// proxy filters those of MessageConst.STRING_HASH_SET
// (proxy/.../grpc/v2/common/GrpcConverter.java, buildUserAttributes), but
// a check's half message also carries __transactionId__ and
// TRANSACTION_CHECK_TIMES, which the broker puts there and that set
// lacks (common/.../message/MessageConst.java;
// broker/.../transaction/queue/TransactionalMessageServiceImpl.java,
// needDiscard). A producer's own property never has one of these names
// (the keys are the broker's), so a message's Properties are as sent.
var brokerProperties = map[string]bool{
	"__transactionId__": true, "TRANSACTION_CHECK_TIMES": true, "TRAN_PREPARED_QUEUE_OFFSET": true,
	"TRACE_ON": true, "MSG_REGION": true, "KEYS": true, "TAGS": true, "WAIT": true, "DELAY": true,
	"RETRY_TOPIC": true, "REAL_TOPIC": true, "REAL_QID": true, "TRAN_MSG": true, "PGROUP": true,
	"MIN_OFFSET": true, "MAX_OFFSET": true, "BUYER_ID": true, "ORIGIN_MESSAGE_ID": true,
	"TRANSFER_FLAG": true, "CORRECTION_FLAG": true, "MQ2_FLAG": true, "RECONSUME_TIME": true,
	"UNIQ_KEY": true, "MAX_RECONSUME_TIMES": true, "CONSUME_START_TIME": true, "POP_CK": true,
	"POP_CK_OFFSET": true, "1ST_POP_TIME": true, "DUP_INFO": true, "EXTEND_UNIQ_INFO": true,
	"INSTANCE_ID": true, "CORRELATION_ID": true, "REPLY_TO_CLIENT": true, "TTL": true,
	"ARRIVE_TIME": true, "PUSH_REPLY_TIME": true, "CLUSTER": true, "MSG_TYPE": true,
	"INNER_MULTI_QUEUE_OFFSET": true, "TIMER_DELAY_SEC": true, "TIMER_DELIVER_MS": true,
	"TIMER_ENQUEUE_MS": true, "TIMER_DEQUEUE_MS": true, "TIMER_ROLL_TIMES": true, "TIMER_OUT_MS": true,
	"TIMER_DEL_UNIQKEY": true, "TIMER_DELAY_LEVEL": true, "__BORNHOST": true, "BORN_TIMESTAMP": true,
	"TRAN_OFFSET": true,
}

// recoverOrphan answers the server's question about an orphaned
// transaction, in its own goroutine: the checker's resolution, sent back
// with EndTransaction (source SOURCE_SERVER_CHECK) on the connection that
// asked. Without a checker, or when it says Unknown, nothing is
// sent: the server asks again.
func (c *rmqClient) recoverOrphan(cn *rmqConn, cmd *rocketmqv2.RecoverOrphanedTransactionCommand) {
	m, system := fromRMQ(cmd.GetMessage())
	info := CheckInfo{TransactionID: cmd.GetTransactionId(), System: system}
	check := c.set.Checker
	if check == nil {
		c.logger.Warn("rocketmq: orphaned transaction left to the server: no transaction checker (WithTransactionChecker)",
			"endpoint", cn.addr, "transaction_id", cmd.GetTransactionId(), "message_id", m.ID)
		return
	}
	c.wg.Add(1) // the telemetry goroutine is counted: the count is not 0
	go func() {
		defer c.wg.Done()
		res := c.runChecker(check, m, info)
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
func (c *rmqClient) runChecker(check Checker, m message.Message, info CheckInfo) (res Resolution) {
	defer func() {
		if r := recover(); r != nil {
			c.logger.Error("rocketmq: transaction checker panicked; transaction left open", "message_id", m.ID, "panic", fmt.Sprint(r))
			res = Unknown
		}
	}()
	return check(c.ctx, m, info)
}

// fromRMQ converts a v2 message the server sent (a half message) to a
// message.Message: id, topic, tag, keys, properties as sent and body,
// Transactional set; system holds the broker's properties found among the
// user properties (brokerProperties), nil when none.
func fromRMQ(v *rocketmqv2.Message) (m message.Message, system map[string]string) {
	sp := v.GetSystemProperties()
	props := v.GetUserProperties()
	for k, val := range props {
		if !brokerProperties[k] {
			continue
		}
		if system == nil {
			system = map[string]string{}
			props = maps.Clone(props)
		}
		system[k] = val
		delete(props, k)
	}
	if len(props) == 0 {
		props = nil
	}
	return message.Message{
		ID:            sp.GetMessageId(),
		Topic:         v.GetTopic().GetName(),
		Tag:           sp.GetTag(),
		Keys:          sp.GetKeys(),
		Properties:    props,
		Body:          v.GetBody(),
		Transactional: true,
	}, system
}
