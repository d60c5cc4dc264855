package wire

import (
	"context"
	"time"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers protoCodec
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/producer/internal/batch"
)

// This file is what each protocol's batch sender shares (the batcher
// itself, which knows neither protocol, is producer/internal/batch; how
// the producer uses it is told in producer/batch.go). An entry's answer is
// a outcome.Outcome: the executor's reading, which the public API never sees.

// Refusal is what the batcher's split decision (batch.Split) reads of o.
func Refusal(o outcome.Outcome) batch.Refusal {
	return batch.Refusal{Permanent: o.Kind == outcome.Permanent, Code: o.Code}
}

// FailAll answers every entry of b with the outcome o of a call that
// failed as a whole with err, whose peer pr is empty when the request
// never left the client for the broker at name (NotSent), unless the
// batcher splits b.
func FailAll[M any](b *batch.Batch[M, outcome.Outcome], o outcome.Outcome, err error, pr *peer.Peer, name string) {
	r := Refusal(o)
	o, unsent := NotSent(o, err, pr, name)
	b.FailAll(o, unsent, r)
}

// BatchDeadline is when an entry's wait, and so its batch's call, ends: the
// attempt's deadline, or ctx's when the attempt has none.
func BatchDeadline(ctx context.Context, deadline time.Time) time.Time {
	if deadline.IsZero() {
		deadline, _ = ctx.Deadline()
	}
	return deadline
}

// CutShort is the unknown outcome of a first attempt whose context ended
// while its message waited in a batch: the context's error as a gRPC
// status (DEADLINE_EXCEEDED or CANCELLED, which producer.GRPCClassifier
// reads as FailedUnknown with no code).
func CutShort(ctx context.Context) outcome.Outcome {
	return outcome.Outcome{Kind: outcome.FailedUnknown, Err: status.FromContextError(ctx.Err()).Err()}
}

// BatchCodec is the proto codec, which tells the batch when its request
// has been encoded, so that an entry that leaves need not wait for the
// answer before its caller may change the message. It is given to the
// batch's call with grpc.ForceCodecV2, an API gRPC marks experimental.
type BatchCodec struct{ B interface{ MarkEncoded() } }

var protoCodec = encoding.GetCodecV2("proto")

// Marshal encodes v, then tells the batch.
func (c BatchCodec) Marshal(v any) (mem.BufferSlice, error) {
	out, err := protoCodec.Marshal(v)
	c.B.MarkEncoded()
	return out, err
}

// Unmarshal is the proto codec's.
func (BatchCodec) Unmarshal(data mem.BufferSlice, v any) error { return protoCodec.Unmarshal(data, v) }

// Name is the proto codec's.
func (BatchCodec) Name() string { return protoCodec.Name() }

// EntrySize is what a message counts towards a batch's bytes.
func EntrySize(id, topic, tag string, keys []string, props map[string]string, body []byte) int {
	n := 32 + len(id) + len(topic) + len(tag) + len(body)
	for _, k := range keys {
		n += len(k) + 2
	}
	for k, v := range props {
		n += len(k) + len(v) + 4
	}
	return n
}
