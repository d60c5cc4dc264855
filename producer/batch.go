package producer

import (
	"fmt"
	"time"

	"github.com/rocketry-go/rocketry/producer/internal/batch"
)

// This file joins the batcher of async sends (WithBatching; the batcher
// itself, which knows neither protocol, is producer/internal/batch) to the
// producer. SendMessage carries several messages and answers each one, on
// both protocols, so async sends to the same endpoint and topic share one
// RPC:
//
//   - Batching is a property of a send's first attempt only, made inside its
//     attempter: the first attempt of an async send joins the open batch of
//     its (endpoint, topic), instead of sending its message alone, and
//     blocks until the batch's answer for its own entry comes back. Every
//     later attempt goes alone, exactly as a sync Send's. The executor sees
//     one attempt with one outcome, and stays the only owner of the send's
//     state and decisions: each message keeps its ID, attempts, retries,
//     events and callback, and only the entries that failed are retried,
//     each by its own outcome.
//   - When a batch is sent (full, lingered, or every async send in flight
//     waiting), its RPC's deadline, and an entry that leaves while it waits,
//     are the batcher's rules (package batch).
//   - Each entry gets its own outcome: on apache.rocketmq.v2 from its own
//     status, or from the one entry a RocketMQ 5 proxy answers for a whole
//     batch, which is every message's (wirermq.ClassifyEntries); on rocketry.v1
//     from its own result when the call succeeded, or the call's classified
//     status when it failed, the same for every entry.
//   - Except one case: a Permanent answer (4xx) to a whole request of
//     several messages says nothing about which message was bad: on
//     rocketry.v1 (which refuses a request whole when one message is
//     invalid), as a gRPC status (a request over the server's size limit),
//     or on apache.rocketmq.v2 as a request status that no entry has of its
//     own, or that every entry repeats (a request over the broker's batch
//     limit; see refusedWhole). Each entry is then sent again alone, within
//     the same attempt, its answer the attempt's outcome (batch.Split
//     decides it, for both protocols).
//   - An entry whose context ends while it waits leaves at once with an
//     unknown outcome (wire.CutShort), and the batch goes on for the
//     others. Once sent, it leaves as soon as the request is encoded, seen
//     through wire.BatchCodec, the proto codec given with
//     grpc.ForceCodecV2, an API gRPC marks experimental.
//
// Each protocol's sender, and the payload of its entries, is in its own
// file: producer/internal/wire/v1/batch.go (rocketry.v1),
// producer/internal/wire/rocketmq/batch.go (apache.rocketmq.v2);
// what they share is in producer/internal/wire (batch.go), where an
// entry's answer is a Outcome, the executor's reading.
// The batcher costs a sync Send nothing: Send never batches.

// Defaults of WithBatching.
const (
	// DefaultBatchLinger is how long a batch waits for more messages after
	// its first one.
	DefaultBatchLinger = 500 * time.Microsecond
	// DefaultBatchMessages is the most messages of a batch: the bundled
	// broker's default limit of one request (broker.DefaultMaxBatch).
	DefaultBatchMessages = 128
	// DefaultBatchBytes is the most bytes of a batch (bodies, IDs, topic,
	// tag, keys and properties), as franz-go's default batch size: well
	// under gRPC's default 4 MiB limit of a request.
	DefaultBatchBytes = 1 << 20
)

// maxBatchLinger is the longest linger WithBatching accepts.
const maxBatchLinger = time.Second

// batchConfig is WithBatching's; a linger of 0 is no batching.
type batchConfig = batch.Config

var defaultBatchConfig = batchConfig{Linger: DefaultBatchLinger, MaxMessages: DefaultBatchMessages, MaxBytes: DefaultBatchBytes}

// WithBatching sets how async sends share SendMessage calls, overriding the
// default of DefaultBatchLinger (500 µs), DefaultBatchMessages (128) and
// DefaultBatchBytes (1 MiB) over rocketry.v1, and of no batching over
// RocketMQ5: a RocketMQ 5 proxy sends a request of several messages to its
// broker as one batch whose properties are its first message's, and the
// broker appends them to every message of the batch, so that its consumers
// read the first message's tag, keys, properties and delivery time on
// every message (and, on brokers before Apache RocketMQ's fix of issue
// #9416, its message ID). Over RocketMQ5 a batch therefore holds only
// messages whose tag, keys and properties agree, and a timed message goes
// alone as a FIFO or transactional one does; turn it on where consumers do
// not read message IDs, or the brokers have that fix.
// The first attempt of a SendAsync or
// TrySendAsync joins the batch of its endpoint and topic, which is sent in
// one SendMessage when it holds maxMessages messages (at most a quarter of
// WithMaxInFlight, so that several batches are in flight at once) or
// maxBytes bytes, when linger has passed since its first message, or at
// once when every async send in flight is already waiting in a batch or on
// the wire (no other message could join it). Each message keeps its own ID,
// outcome, events, retries and callback: only the messages the answer
// failed are retried, each by its own outcome, and every retry goes alone.
// A sync Send and a message of maxBytes or more always go alone. When a
// batch of several messages is refused whole by a 4xx that names none of
// them (rocketry.v1 refuses a whole request for one bad message), each
// message is sent again alone within the same attempt, so that a bad
// message costs the others no attempt, retry or budget.
//
// A linger of 0 turns batching off, as does a WithMaxInFlight below 8.
// Otherwise linger must be at most 1 s, maxMessages >= 1 (1 sends every
// message alone) and no more than the broker takes in one request (the
// bundled broker takes 128, broker.DefaultMaxBatch), and maxBytes >= 1.
// Applies to New and NewFromConn.
func WithBatching(linger time.Duration, maxMessages, maxBytes int) Option {
	return option{"WithBatching", scopeProducer, func(c *config) error {
		v := fmt.Sprintf("%v, %d, %d", linger, maxMessages, maxBytes)
		c.batchSet = true
		switch {
		case linger < 0 || linger > maxBatchLinger:
			return invalid(v, "linger must be in [0, 1s]")
		case linger == 0:
			c.batch = batchConfig{}
			return nil
		case maxMessages < 1:
			return invalid(v, "maxMessages must be >= 1")
		case maxBytes < 1:
			return invalid(v, "maxBytes must be >= 1")
		}
		c.batch = batchConfig{Linger: linger, MaxMessages: maxMessages, MaxBytes: maxBytes}
		return nil
	}}
}
