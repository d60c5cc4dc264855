package producer

import (
	"context"
	"time"

	"github.com/rocketry-go/rocketry/producer/internal/batch"
	"github.com/rocketry-go/rocketry/producer/internal/wire"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers protoCodec
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
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
//     batch, which is every message's (classifyEntries); on rocketry.v1
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
//     unknown outcome (cutShort), and the batch goes on for the others.
//     Once sent, it leaves as soon as the request is encoded, seen through
//     batchCodec, the proto codec given with grpc.ForceCodecV2, an API gRPC
//     marks experimental.
//
// Each protocol's sender, and the payload of its entries, is in its own
// file: v1_batch.go (rocketry.v1), rocketmq_batch.go (apache.rocketmq.v2).
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

// refusal is what the batcher's split decision reads of o.
func (o Outcome) refusal() batch.Refusal {
	return batch.Refusal{Permanent: o.Kind == Permanent, Code: o.Code}
}

// failAll answers every entry of b with the outcome o of a call that
// failed as a whole with err, whose peer pr is empty when the request
// never left the client for the broker at name (wire.NotSent), unless the
// batcher splits b.
func failAll[M any](b *batch.Batch[M, Outcome], o Outcome, err error, pr *peer.Peer, name string) {
	r := o.refusal()
	so, unsent := wire.NotSent(o.internal(), err, pr, name)
	b.FailAll(publicOutcome(so), unsent, r)
}

// batchDeadline is when an entry's wait, and so its batch's call, ends: the
// attempt's deadline, or ctx's when the attempt has none.
func batchDeadline(ctx context.Context, deadline time.Time) time.Time {
	if deadline.IsZero() {
		deadline, _ = ctx.Deadline()
	}
	return deadline
}

// cutShort is the unknown outcome of a first attempt whose context ended
// while its message waited in a batch.
func cutShort(ctx context.Context) Outcome {
	return classifyError(status.FromContextError(ctx.Err()).Err())
}

// batchCodec is the proto codec, which tells the batch when its request
// has been encoded, so that an entry that leaves need not wait for the
// answer before its caller may change the message.
type batchCodec struct{ b interface{ MarkEncoded() } }

var protoCodec = encoding.GetCodecV2("proto")

func (c batchCodec) Marshal(v any) (mem.BufferSlice, error) {
	out, err := protoCodec.Marshal(v)
	c.b.MarkEncoded()
	return out, err
}

func (batchCodec) Unmarshal(data mem.BufferSlice, v any) error { return protoCodec.Unmarshal(data, v) }
func (batchCodec) Name() string                                { return protoCodec.Name() }

// entrySize is what a message counts towards a batch's bytes.
func entrySize(id, topic, tag string, keys []string, props map[string]string, body []byte) int {
	n := 32 + len(id) + len(topic) + len(tag) + len(body)
	for _, k := range keys {
		n += len(k) + 2
	}
	for k, v := range props {
		n += len(k) + len(v) + 4
	}
	return n
}
