package wire

import (
	"context"

	"github.com/rocketry-go/rocketry/message"
	"github.com/rocketry-go/rocketry/senderr"
)

// Transactions is what only RocketMQ 5 has (producer/internal/wire/rocketmq
// implements it): a transaction's half messages, their end, and recall.
// The producer's BeginTransaction and Recall assert their transport for
// it, and are producer.ErrNotRocketMQ5 when it has none.
type Transactions interface {
	// SendHalf runs one prepared send of the half message m (Transactional
	// set) through the executor: retried only while it is known not
	// stored. It returns the receipt (with the broker's TransactionID) and
	// the address of the connection that stored it, for EndTransaction; or
	// the send's failure.
	SendHalf(ctx context.Context, m message.Message) (*message.Receipt, string, *senderr.SendError)
	// EndTransaction ends the transaction of h, committed or rolled back,
	// retrying failures with the producer's attempts and failure schedule
	// within ctx; it returns the attempts made. An answer that the
	// transaction is not found wraps the protocol's sentinel for it.
	EndTransaction(ctx context.Context, h Half, commit bool) (int, error)
	// Recall removes the timed message of handle in topic before its
	// delivery time: its id, the address of the last attempt, the
	// attempts made.
	Recall(ctx context.Context, topic, handle string) (id, at string, attempts int, err error)
}

// Half is a stored half message: what EndTransaction needs.
type Half struct {
	MsgID, TxID, Topic string
	Addr               string // the connection that stored it
}
