package wirev1

import (
	"context"
	"fmt"
	"time"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/producer/internal/batch"
	"github.com/rocketry-go/rocketry/producer/internal/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
)

// This file is the rocketry.v1 side of the batcher (producer/batch.go): one
// SendMessage of a batch on an endpoint's connection, and how its answer
// is read for each message.

// v1Item is a rocketry.v1 message in a batch: its entry's payload.
type v1Item struct {
	// msg is written by its send before it joins; the batch's goroutine
	// reads it until the request is encoded.
	msg *rocketryv1.Message
	// id is the message's ID, written by its send before it joins: the
	// batch reads it after the request is encoded.
	id string
	// res is written by the batch's goroutine (v1Batch.SendBatch) before
	// the batch is done, and read by its send after: the response's
	// Results of one message.
	res [1]*rocketryv1.SendResult
}

// v1Entry is a rocketry.v1 message in a batch.
type v1Entry = batch.Entry[v1Item, outcome.Outcome]

// v1Batch sends a batch on one endpoint's connection.
type v1Batch struct{ ep *endpoint }

func (s v1Batch) SendBatch(ctx context.Context, b *batch.Batch[v1Item, outcome.Outcome]) {
	es := b.Entries()
	n := len(es)
	req := &rocketryv1.SendMessageRequest{Messages: make([]*rocketryv1.Message, n)}
	for i, e := range es {
		req.Messages[i] = e.Msg.msg
	}
	var resp rocketryv1.SendMessageResponse
	var pr peer.Peer
	err := s.ep.cc.Invoke(ctx, sendMethod, req, &resp, grpc.Peer(&pr), grpc.ForceCodecV2(wire.BatchCodec{B: b}))
	b.MarkEncoded()
	if err != nil {
		wire.FailAll(b, Classify(err), err, &pr, s.ep.name)
		return
	}
	if len(resp.Results) != n {
		err = fmt.Errorf("producer: broker answered %d results for %d messages", len(resp.Results), n)
		b.FailAll(outcome.Outcome{Kind: outcome.FailedUnknown, Err: err}, false, batch.Refusal{})
		return
	}
	for i, e := range es {
		r := resp.Results[i]
		if id := r.GetMessageId(); id != "" && id != e.Msg.id {
			o := outcome.Outcome{Kind: outcome.FailedUnknown, Err: fmt.Errorf("producer: broker answered result %d for message %q, sent as %q", i, id, e.Msg.id)}
			b.Answer(e, o, true, wire.Refusal(o))
			continue
		}
		b.Answer(e, outcome.Outcome{Kind: outcome.Stored}, true, batch.Refusal{})
		e.Msg.res[0] = r
	}
}

// attemptBatched is the first attempt of an async send over rocketry.v1:
// its message joins the batch of its connection and topic. ok is false
// when the message goes alone instead: it could not join, or the batch's
// answer said nothing of it.
func (c *sendCall) attemptBatched(ctx context.Context, ep *endpoint, deadline time.Time) (o outcome.Outcome, unsent, ok bool) {
	bt := c.bt
	c.bt = nil // only the first attempt joins a batch
	e := &v1Entry{
		Msg:      v1Item{msg: &c.msg, id: c.msg.MessageId},
		Size:     wire.EntrySize(c.msg.MessageId, c.msg.Topic, c.msg.Tag, c.msg.Keys, c.msg.Properties, c.msg.Body),
		Deadline: wire.BatchDeadline(ctx, deadline), // the batch's call ends by then, and so does the wait for it
	}
	if !batch.Join(bt, batch.Key{To: ep, Topic: c.msg.Topic}, v1Batch{ep}, e) {
		return outcome.Outcome{}, false, false
	}
	a, answered := batch.Wait(ctx, bt, e)
	switch {
	case !answered:
		return wire.CutShort(ctx), a.Unsent, true
	case a.Split:
		return outcome.Outcome{}, false, false
	}
	if a.Outcome.Kind == outcome.Stored {
		c.resp.Results = e.Msg.res[:]
	}
	return a.Outcome, a.Unsent, true
}
