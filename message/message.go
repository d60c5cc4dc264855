// Package message is the vocabulary of what a send carries: the Message
// handed to the producer and the Receipt of one that was stored.
//
// It is a leaf package, as brokercode, outcome and event are: the
// producer's API speaks it (producer.Message is an alias of Message,
// producer.SendReceipt of Receipt) and its wire protocols (under
// producer/internal) take the Message and make the Receipt, so that a
// send's message and receipt are one type on both sides, never copied
// from one into the other. The producer validates a Message before any
// attempt (producer.Send's doc says what it checks).
package message

import "time"

// Message is one message to send. A Message must not be changed while a send
// of it is in flight.
type Message struct {
	// ID identifies the message to the broker, which stores each ID once.
	// When empty, the producer sets it before the first attempt; every
	// attempt of a send reuses it, so a retry never stores a duplicate.
	ID string
	// Topic is required.
	Topic string
	// Tag is an optional sub-topic a consumer may filter on.
	Tag string
	// Keys are optional business keys, for look-up.
	Keys []string
	// Properties are optional user properties.
	Properties map[string]string
	// Body is the payload; at most the producer's MaxBodyBytes.
	Body []byte
	// Transactional marks a message that is never retried after an outcome
	// that is unknown (an attempt's timeout, a lost connection, a 5xx): only
	// after an explicit "not stored" such as 530 TOO_MANY_REQUESTS.
	Transactional bool
	// MessageGroup makes a FIFO message: the messages of one group of a
	// topic are stored on one queue in the order they were sent, whatever
	// the retries (docs/retries.md): the producer sends a group's next
	// message only after the previous one's outcome, never batches it, and
	// keeps its retries on the endpoint the group hashes to. Empty: no
	// group. At most producer.MaxMessageGroupBytes bytes, not blank,
	// without control characters.
	MessageGroup string
	// DeliveryTime makes a timed message: the broker keeps it from
	// consumers until then. The zero time (or a time past) delivers at
	// once; at most producer.MaxDeliveryDelay ahead.
	//
	// A message is of one type, as in the official RocketMQ clients:
	// MessageGroup (FIFO), DeliveryTime (timed) and Transactional exclude
	// each other.
	DeliveryTime time.Time
}

// Receipt says where a message was stored.
type Receipt struct {
	// MessageID is the message's ID.
	MessageID string
	// QueueID and Offset are the message's place in the topic. Over
	// RocketMQ 5, QueueID is the queue the request named: a proxy chooses
	// the queue itself and its answer does not say which, so only Offset
	// is the broker's word.
	QueueID int32
	Offset  int64
	// Duplicate is true when the broker had already stored this ID (an
	// earlier attempt whose answer was lost); QueueID and Offset are then
	// the original's.
	Duplicate bool
	// Attempts is the number of attempts made, counting the first.
	Attempts int
	// TransactionID is the broker's id of the transaction of a half
	// message (producer.Transaction.Send); empty otherwise.
	TransactionID string
	// RecallHandle, over RocketMQ 5, names a timed message (DeliveryTime)
	// that waits for its delivery time, for producer.Producer.Recall;
	// empty for any other message, or when the server gave none.
	RecallHandle string
}
