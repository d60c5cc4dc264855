package wirermq

import "errors"

// The sentinels of RocketMQ 5's own errors: each is one of the producer's
// public errors (the same text), which producer's publicError substitutes
// for it.
var (
	// ErrTransactionNotFound is producer.ErrTransactionNotFound.
	ErrTransactionNotFound = errors.New("producer: the server has no such open transaction")
	// ErrRecallTooLate is producer.ErrRecallTooLate.
	ErrRecallTooLate = errors.New("producer: too late to recall: the message is due")
	// ErrRecallHandle is producer.ErrRecallHandle.
	ErrRecallHandle = errors.New("producer: invalid recall handle")
)
