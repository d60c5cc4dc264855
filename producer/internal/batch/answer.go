package batch

import "github.com/rocketry-go/rocketry/brokercode"

// Refusal is what the split decision reads of an answer: whether it
// refuses its message for good (a Permanent outcome, a 4xx), and with
// which code.
type Refusal struct {
	Permanent bool
	Code      brokercode.Code
}

// Split is the split decision, the one place it is made: an answer to a
// request of n messages that refuses for good (r) without naming the
// message (own false: a gRPC status, or a request status that no entry
// has of its own or that every entry repeats) says nothing about which
// message was bad, so each message is sent again alone, within the same
// attempt, its own answer the attempt's outcome; as Kafka's producer
// splits a batch refused as too large without counting a retry. The send's
// attempts, failure schedule, retry budget and endpoint are untouched, so a
// good message is never failed, nor its retries spent, by a bad neighbour;
// the only cost is the batch's round trip, within the attempt's timeout.
// A batch of one message is its message's answer. TOPIC_NOT_FOUND is the
// exception's exception: a batch has one topic, so it is true of every
// message.
func Split(n int, own bool, r Refusal) bool {
	return n > 1 && !own && r.Permanent && r.Code != brokercode.TopicNotFound
}

// Answer gives e, an entry of b, the answer o to b's request: e's own when
// own (the answer names its message), the request's otherwise. It reports
// whether the answer stands: false when e is to be sent alone instead
// (Split). Called by b's Sender, on the batch's goroutine.
func (b *Batch[M, O]) Answer(e *Entry[M, O], o O, own bool, r Refusal) bool {
	if Split(len(b.entries), own, r) {
		e.answer = Answer[O]{Split: true}
		return false
	}
	e.answer = Answer[O]{Outcome: o}
	return true
}

// FailAll gives every entry of b the outcome o of a request that failed as
// a whole (a gRPC error, which names no message; unsent when the request
// never left the client), or marks them all to be sent alone when Split
// says so. Called by b's Sender, on the batch's goroutine.
func (b *Batch[M, O]) FailAll(o O, unsent bool, r Refusal) {
	split := Split(len(b.entries), false, r)
	for _, e := range b.entries {
		if split {
			e.answer = Answer[O]{Split: true}
		} else {
			e.answer = Answer[O]{Outcome: o, Unsent: unsent}
		}
	}
}
