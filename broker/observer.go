package broker

import (
	"time"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// The results of a SendRecord: what the broker did with one message of
// one send request.
const (
	// SendStored: the message is stored now (a copy when its id was stored
	// before and the send did not deduplicate).
	SendStored = "stored"
	// SendDuplicate: the broker had stored the message's id before; the
	// answer is the original's place and nothing is stored.
	SendDuplicate = "duplicate"
	// SendThrottled: refused for load (rocketry.v1 530, apache.rocketmq.v2
	// 42900); SendRecord.Reason is "BACKLOG", "STORAGE_LOAD" or
	// "SEND_RATE", or the send queue's "TIMEOUT_CLEAN_QUEUE" or "OVERLOAD"
	// (WithSendQueue). Nothing is stored.
	SendThrottled = "throttled"
	// SendFault: an injected fault answered; SendRecord.Reason is the
	// fault: "internal", "unavailable", "blackhole", "drop", or "latency"
	// when the caller gave up (or the broker stopped) during the added
	// latency; nothing is stored. Or "stored_internal"
	// (Faults.StoredInternalRate): the message is stored, or answered as a
	// duplicate where the face deduplicates, and the answer is INTERNAL.
	SendFault = "fault"
	// SendBadRequest: refused as invalid; SendRecord.Reason is the
	// rocketry.v1 code's name: "BAD_REQUEST", "MESSAGE_TOO_LARGE" or
	// "TOPIC_NOT_FOUND". Nothing is stored.
	SendBadRequest = "bad_request"
)

// SendRecord is what a send observer (WithSendObserver) sees of one
// message of one send request, on either protocol. A client's retries of a
// message are several records with the same MessageID, so a test can count
// a client's attempts and measure the gaps between them.
type SendRecord struct {
	// Protocol is ProtocolRocketryV1 or ProtocolRocketMQV2.
	Protocol string
	// MessageID and Topic are the message's as sent; "" when the request
	// did not carry them.
	MessageID string
	Topic     string
	// Time is when the broker received the request, by its clock
	// (WithClock), before any injected latency.
	Time time.Time
	// Result is what the broker did: SendStored, SendDuplicate,
	// SendThrottled, SendFault or SendBadRequest. Reason says why for the
	// last three.
	Result string
	Reason string
}

// SendObserver is called once per message per send request, on the
// goroutine that serves the request, after the broker has decided and
// before it answers. It must not block; it may be called from many
// goroutines at once.
type SendObserver func(SendRecord)

// WithSendObserver sets a function the broker calls with a SendRecord for
// every message of every send request, on both protocols, overriding the
// default of none. Tests use it to see how a client retried. A nil
// function is an error.
func WithSendObserver(f SendObserver) Option {
	return optionFunc(func(c *config) error {
		if f == nil {
			return errorf("WithSendObserver(nil): the observer must not be nil")
		}
		c.observer = f
		return nil
	})
}

// observe reports what send decided for each message of req.
func (b *Broker) observe(req sendRequest, at time.Time, whole *refusal, res []entryResult) {
	for i, m := range req.msgs {
		rec := SendRecord{Protocol: req.protocol, MessageID: m.GetMessageId(), Topic: m.GetTopic(), Time: at}
		r := whole
		if r == nil {
			r = res[i].refused
		}
		switch {
		case r != nil:
			rec.Result, rec.Reason = r.result()
		case res[i].duplicate:
			rec.Result = SendDuplicate
		default:
			rec.Result = SendStored
		}
		b.cfg.observer(rec)
	}
}

// result is how a SendRecord names r.
func (r *refusal) result() (string, string) {
	switch {
	case r.fault != faultNone:
		return SendFault, faultNames[r.fault]
	case r.tag != "":
		return SendThrottled, r.tag
	case r.code == rocketryv1.Code_CODE_TOO_MANY_REQUESTS:
		return SendThrottled, throttleNames[r.reason]
	}
	return SendBadRequest, codeNames[r.code]
}

// codeNames are the names of the rocketry.v1 codes a bad request gets.
var codeNames = map[rocketryv1.Code]string{
	rocketryv1.Code_CODE_BAD_REQUEST:       "BAD_REQUEST",
	rocketryv1.Code_CODE_MESSAGE_TOO_LARGE: "MESSAGE_TOO_LARGE",
	rocketryv1.Code_CODE_TOPIC_NOT_FOUND:   "TOPIC_NOT_FOUND",
}
