package producer

import (
	"context"
	"time"

	"github.com/rocketry-go/rocketry/producer/internal/batch"
)

// transport is one wire protocol under a Producer: the Producer holds one
// and never asks which. v1Transport (rocketry.v1, v1_transport.go) sends
// to a host:port list, NewFromConn's connection or a resolved target;
// rmqTransport (apache.rocketmq.v2, rocketmq_transport.go) through a
// RocketMQ 5 proxy. What only RocketMQ 5 has (BeginTransaction, Recall)
// takes the client from an *rmqTransport by a type assertion, and is
// ErrNotRocketMQ5 otherwise.
type transport interface {
	// refuse returns an error wrapping ErrInvalidMessage for a valid
	// message that this protocol does not take from Send; nil otherwise.
	refuse(m *Message) error
	// prepare makes the protocol's checks of a valid message before any
	// attempt (the server's limits), then gives it an ID when it has none.
	prepare(m *Message) error
	// send runs one prepared send of m (what goes on the wire) through
	// the executor; with bt its first attempt joins a batch, with pn every
	// attempt goes where the message may be stored (Resend).
	send(ctx context.Context, p *Producer, m *Message, bt *batch.Batcher, pn *pin) (*SendReceipt, *SendError)
	// findPin returns the endpoint of a resend named name (nil when there
	// is none): one of the rocketry.v1 connections, or for RocketMQ 5 a
	// queue of the broker of that name and endpoints in topic's route.
	findPin(ctx context.Context, p *Producer, topic, name string) (*pin, error)
	// endpointNames lists where the producer sends, for an error.
	endpointNames() []string
	// close ends the protocol's client (RocketMQ 5: NotifyClientTermination
	// within ctx, or within timeout once ctx has ended) and then closes the
	// connections New made.
	close(ctx context.Context, timeout time.Duration) error
}
