package wire

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rocketry-go/rocketry/message"
	"github.com/rocketry-go/rocketry/producer/internal/batch"
	"github.com/rocketry-go/rocketry/producer/internal/send"
	"github.com/rocketry-go/rocketry/senderr"
)

// Transport is one wire protocol under a Producer, which holds one and
// never asks which: rocketry.v1 (producer/internal/wire/v1) and
// apache.rocketmq.v2 (producer/internal/wire/rocketmq). It takes the
// producer's message and makes its receipt, both of the public leaf
// package message (producer.Message and producer.SendReceipt are their
// aliases).
type Transport interface {
	// Refuse returns an error for a valid message that this protocol does
	// not take from Send; nil otherwise.
	Refuse(m message.Message) error
	// Prepare makes the protocol's checks of a valid message before any
	// attempt (the server's limits), and returns its ID: m's, or a new one
	// when it has none.
	Prepare(m message.Message) (id string, err error)
	// Send runs one prepared send of m (what goes on the wire) through the
	// executor; with bt its first attempt joins a batch, with pn every
	// attempt goes where the message may be stored (a resend). It returns
	// the receipt, or the send's failure.
	Send(ctx context.Context, m message.Message, bt *batch.Batcher, pn *send.Pin) (*message.Receipt, *senderr.SendError)
	// FindPin returns the endpoint of a resend named name (nil when there
	// is none): one of the rocketry.v1 connections, or for RocketMQ 5 a
	// queue of the broker of that name and endpoints in topic's route.
	FindPin(ctx context.Context, topic, name string) (*send.Pin, error)
	// EndpointNames lists where the producer sends, for an error.
	EndpointNames() []string
	// Close ends the protocol's client (RocketMQ 5: NotifyClientTermination
	// within ctx, or within timeout once ctx has ended) and then closes the
	// connections it made.
	Close(ctx context.Context, timeout time.Duration) error
}

// Env is what a transport takes of the producer, made once in New: the
// executor's policy, whether endpoints are paced, and the context every
// send's ends with (when Close gives up waiting).
type Env struct {
	Cfg     *send.Config
	Pacing  bool
	HardCtx context.Context
}

// Run runs x to its end: nil when its message is stored, else the send's
// failure, which a transport's Send returns.
func Run(ctx context.Context, x *send.Executor) *senderr.SendError {
	f, _ := x.Run(ctx)
	return f
}

// IDGen makes message IDs: a random per-process prefix and a counter, so an
// ID costs one small allocation and never repeats within a process.
type IDGen struct {
	prefix string
	n      atomic.Uint64
}

// NewIDGen returns a generator with a new random prefix.
func NewIDGen() *IDGen {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return &IDGen{prefix: hex.EncodeToString(b[:]) + "-"}
}

// Next returns a new ID.
func (g *IDGen) Next() string {
	var buf [40]byte
	out := append(buf[:0], g.prefix...)
	out = strconv.AppendUint(out, g.n.Add(1), 36)
	return string(out)
}

// TargetError is a constructor's error for a bad target (the producer's
// and the transports'); errors.Is matches senderr.ErrInvalidTarget, which
// is producer.ErrInvalidTarget.
type TargetError struct{ Msg string }

func (e *TargetError) Error() string        { return e.Msg }
func (e *TargetError) Is(target error) bool { return target == senderr.ErrInvalidTarget }

// BadTarget is a *TargetError of the formatted text.
func BadTarget(format string, args ...any) error {
	return &TargetError{Msg: fmt.Sprintf(format, args...)}
}
