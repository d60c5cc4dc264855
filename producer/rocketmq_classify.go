package producer

import (
	"errors"
	"fmt"
	"strings"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/apache/rocketmq/v2"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// RocketMQClassifier reads the answer of an apache.rocketmq.v2 call, whose
// status is in the response body. A gRPC error (err != nil) is read as
// GRPCClassifier reads it: UNAVAILABLE, DEADLINE_EXCEEDED, a lost connection
// are FailedUnknown, RESOURCE_EXHAUSTED is Throttled, other codes are
// Permanent. Otherwise reply must have a Status (every v2 response does):
// for a *SendMessageResponse the first entry whose status is not OK decides,
// else the top-level status, as the official clients read it; an OK answer
// with no entry is FailedUnknown. The table of codes is at rmqCodeClass.
//
// The Outcome's WireCode is the v2 code (42900, 50001, ...), its Code the
// nearest rocketry.v1 code, its Err a *RocketMQStatusError.
var RocketMQClassifier Classifier = rmqClassifier{}

type rmqClassifier struct{}

func (rmqClassifier) Classify(reply any, err error) Outcome {
	if err != nil {
		return GRPCClassifier.Classify(nil, err)
	}
	switch r := reply.(type) {
	case *rocketmqv2.SendMessageResponse:
		return classifySend(r)
	case interface{ GetStatus() *rocketmqv2.Status }:
		return classifyStatus(r.GetStatus())
	}
	return Outcome{Kind: FailedUnknown, Err: fmt.Errorf("producer: rocketmq answer of type %T has no status", reply)}
}

// classifySend reads a SendMessageResponse of one message.
// A top-level MULTIPLE_RESULTS whose entries all say OK is Stored.
func classifySend(r *rocketmqv2.SendMessageResponse) Outcome {
	entries := r.GetEntries()
	allOK := len(entries) > 0
	for _, e := range entries {
		s := e.GetStatus()
		if s != nil && s.GetCode() != rocketmqv2.Code_OK {
			return classifyStatus(s)
		}
		allOK = allOK && s != nil
	}
	st := r.GetStatus()
	if st.GetCode() == rocketmqv2.Code_MULTIPLE_RESULTS && allOK {
		st = entries[0].GetStatus()
	}
	o := classifyStatus(st)
	if o.Kind == Stored && len(entries) == 0 {
		o = Outcome{Kind: FailedUnknown, WireCode: o.WireCode, Err: errors.New("producer: rocketmq answered OK without a result entry")}
	}
	return o
}

// classifyEntries classifies each of the n messages of one
// SendMessageRequest, for a batch: entry i by its own status; an entry
// without a status, or a message without an entry, by the top-level status
// when that is OK or a failure, and as FailedUnknown when it is
// MULTIPLE_RESULTS or there is no entry (the server said nothing of it).
func classifyEntries(r *rocketmqv2.SendMessageResponse, n int) []Outcome {
	top := classifyStatus(r.GetStatus())
	multiple := r.GetStatus().GetCode() == rocketmqv2.Code_MULTIPLE_RESULTS
	out := make([]Outcome, n)
	entries := r.GetEntries()
	for i := range out {
		switch {
		case i < len(entries) && entries[i].GetStatus() != nil:
			out[i] = classifyStatus(entries[i].GetStatus())
		case !multiple && (top.Kind != Stored || i < len(entries)):
			out[i] = top
		default:
			out[i] = Outcome{Kind: FailedUnknown, WireCode: top.WireCode,
				Err: fmt.Errorf("producer: rocketmq answered no status for message %d of %d (%d entries)", i, n, len(entries))}
		}
	}
	return out
}

// classifyStatus classifies one v2 status; nil reads as CODE_UNSPECIFIED.
func classifyStatus(s *rocketmqv2.Status) Outcome {
	code, msg := int32(s.GetCode()), s.GetMessage()
	o := classifyCode(code, msg)
	if o.Kind != Stored {
		o.Err = &RocketMQStatusError{Code: code, Message: msg}
	}
	return o
}

// rmqClass is a row of the code table.
type rmqClass struct {
	kind OutcomeKind
	code rocketryv1.Code
}

// rmqCodeClass is what each apache.rocketmq.v2 code says of a sent message.
// The codes and their meaning are upstream's (definition.proto's Code); the
// kind is our reading, and where it departs from "4xxxx is the caller's
// fault, 5xxxx the server's" the reason is given.
//
//	20000 OK                                  Stored
//	0     CODE_UNSPECIFIED, 30000 MULTIPLE_RESULTS without a deciding entry
//	                                          FailedUnknown: nothing said
//	40000-40020 BAD_REQUEST, ILLEGAL_*, INVALID_*, MESSAGE_CORRUPTED,
//	      CLIENT_ID_REQUIRED ...              Permanent, BAD_REQUEST
//	40100 UNAUTHORIZED, 40200 PAYMENT_REQUIRED, 40300 FORBIDDEN
//	                                          Permanent
//	40400 NOT_FOUND, 40402 TOPIC_NOT_FOUND    Permanent, TOPIC_NOT_FOUND
//	40401, 40403, 40404 (other not-founds)    Permanent
//	40800 REQUEST_TIMEOUT                     FailedUnknown: a timeout says
//	                                          nothing of the message
//	41300 PAYLOAD_TOO_LARGE, 41301 MESSAGE_BODY_TOO_LARGE,
//	43100, 43101 (headers, properties)        Permanent, MESSAGE_TOO_LARGE
//	41302 MESSAGE_BODY_EMPTY                  Permanent, BAD_REQUEST
//	42800 PRECONDITION_FAILED                 Permanent
//	42900 TOO_MANY_REQUESTS                   Throttled, TOO_MANY_REQUESTS;
//	                                          Reason from the message
//	42901, 42902 lite topic/subscription quota
//	                                          Permanent: a quota, not a load
//	50000 INTERNAL_ERROR, 50001 INTERNAL_SERVER_ERROR
//	                                          FailedUnknown, INTERNAL_ERROR:
//	      a proxy answers these for any exception, including one raised
//	      after the broker wrote the message (a failed reply, a failed
//	      hook), so "not stored" cannot be read from them. (rocketry.v1's
//	      500 does say not stored; this one does not.)
//	50002 HA_NOT_AVAILABLE                    FailedUnknown, UNAVAILABLE:
//	      the broker's SLAVE_NOT_AVAILABLE: stored on the leader, not
//	      replicated
//	50100 NOT_IMPLEMENTED                     Permanent
//	50400 PROXY_TIMEOUT                       FailedUnknown: the proxy gave
//	      up waiting; the broker may still store it
//	50401 MASTER_PERSISTENCE_TIMEOUT, 50402 SLAVE_PERSISTENCE_TIMEOUT
//	                                          FailedUnknown: the broker's
//	      FLUSH_DISK_TIMEOUT / FLUSH_SLAVE_TIMEOUT: the message is in the
//	      leader's log, its flush or replication timed out
//	50500 UNSUPPORTED, 50501, 50502           Permanent
//	60000 FAILED_TO_CONSUME_MESSAGE           Permanent (not a send code)
//	other 429xx Throttled; other 4xxxx Permanent; anything else FailedUnknown
var rmqCodeClass = map[rocketmqv2.Code]rmqClass{
	rocketmqv2.Code_OK:                               {Stored, rocketryv1.Code_CODE_UNSPECIFIED},
	rocketmqv2.Code_CODE_UNSPECIFIED:                 {FailedUnknown, rocketryv1.Code_CODE_UNSPECIFIED},
	rocketmqv2.Code_MULTIPLE_RESULTS:                 {FailedUnknown, rocketryv1.Code_CODE_UNSPECIFIED},
	rocketmqv2.Code_UNAUTHORIZED:                     {Permanent, rocketryv1.Code_CODE_UNSPECIFIED},
	rocketmqv2.Code_PAYMENT_REQUIRED:                 {Permanent, rocketryv1.Code_CODE_UNSPECIFIED},
	rocketmqv2.Code_FORBIDDEN:                        {Permanent, rocketryv1.Code_CODE_UNSPECIFIED},
	rocketmqv2.Code_NOT_FOUND:                        {Permanent, rocketryv1.Code_CODE_TOPIC_NOT_FOUND},
	rocketmqv2.Code_TOPIC_NOT_FOUND:                  {Permanent, rocketryv1.Code_CODE_TOPIC_NOT_FOUND},
	rocketmqv2.Code_MESSAGE_NOT_FOUND:                {Permanent, rocketryv1.Code_CODE_UNSPECIFIED},
	rocketmqv2.Code_CONSUMER_GROUP_NOT_FOUND:         {Permanent, rocketryv1.Code_CODE_UNSPECIFIED},
	rocketmqv2.Code_OFFSET_NOT_FOUND:                 {Permanent, rocketryv1.Code_CODE_UNSPECIFIED},
	rocketmqv2.Code_REQUEST_TIMEOUT:                  {FailedUnknown, rocketryv1.Code_CODE_UNSPECIFIED},
	rocketmqv2.Code_PAYLOAD_TOO_LARGE:                {Permanent, rocketryv1.Code_CODE_MESSAGE_TOO_LARGE},
	rocketmqv2.Code_MESSAGE_BODY_TOO_LARGE:           {Permanent, rocketryv1.Code_CODE_MESSAGE_TOO_LARGE},
	rocketmqv2.Code_MESSAGE_BODY_EMPTY:               {Permanent, rocketryv1.Code_CODE_BAD_REQUEST},
	rocketmqv2.Code_PRECONDITION_FAILED:              {Permanent, rocketryv1.Code_CODE_UNSPECIFIED},
	rocketmqv2.Code_TOO_MANY_REQUESTS:                {Throttled, rocketryv1.Code_CODE_TOO_MANY_REQUESTS},
	rocketmqv2.Code_LITE_TOPIC_QUOTA_EXCEEDED:        {Permanent, rocketryv1.Code_CODE_UNSPECIFIED},
	rocketmqv2.Code_LITE_SUBSCRIPTION_QUOTA_EXCEEDED: {Permanent, rocketryv1.Code_CODE_UNSPECIFIED},
	rocketmqv2.Code_REQUEST_HEADER_FIELDS_TOO_LARGE:  {Permanent, rocketryv1.Code_CODE_MESSAGE_TOO_LARGE},
	rocketmqv2.Code_MESSAGE_PROPERTIES_TOO_LARGE:     {Permanent, rocketryv1.Code_CODE_MESSAGE_TOO_LARGE},
	rocketmqv2.Code_INTERNAL_ERROR:                   {FailedUnknown, rocketryv1.Code_CODE_INTERNAL_ERROR},
	rocketmqv2.Code_INTERNAL_SERVER_ERROR:            {FailedUnknown, rocketryv1.Code_CODE_INTERNAL_ERROR},
	rocketmqv2.Code_HA_NOT_AVAILABLE:                 {FailedUnknown, rocketryv1.Code_CODE_UNAVAILABLE},
	rocketmqv2.Code_NOT_IMPLEMENTED:                  {Permanent, rocketryv1.Code_CODE_UNSPECIFIED},
	rocketmqv2.Code_PROXY_TIMEOUT:                    {FailedUnknown, rocketryv1.Code_CODE_UNSPECIFIED},
	rocketmqv2.Code_MASTER_PERSISTENCE_TIMEOUT:       {FailedUnknown, rocketryv1.Code_CODE_UNSPECIFIED},
	rocketmqv2.Code_SLAVE_PERSISTENCE_TIMEOUT:        {FailedUnknown, rocketryv1.Code_CODE_UNSPECIFIED},
	rocketmqv2.Code_UNSUPPORTED:                      {Permanent, rocketryv1.Code_CODE_UNSPECIFIED},
	rocketmqv2.Code_VERSION_UNSUPPORTED:              {Permanent, rocketryv1.Code_CODE_UNSPECIFIED},
	rocketmqv2.Code_VERIFY_FIFO_MESSAGE_UNSUPPORTED:  {Permanent, rocketryv1.Code_CODE_UNSPECIFIED},
	rocketmqv2.Code_FAILED_TO_CONSUME_MESSAGE:        {Permanent, rocketryv1.Code_CODE_UNSPECIFIED},
}

// classifyCode reads a v2 code and its status message; Err is left to the
// caller.
func classifyCode(code int32, msg string) Outcome {
	c, ok := rmqCodeClass[rocketmqv2.Code(code)]
	switch {
	case ok:
	case code >= 40000 && code < 40100:
		c = rmqClass{Permanent, rocketryv1.Code_CODE_BAD_REQUEST}
	case code >= 42900 && code < 43000:
		c = rmqClass{Throttled, rocketryv1.Code_CODE_TOO_MANY_REQUESTS}
	case code >= 40000 && code < 50000:
		c = rmqClass{Permanent, rocketryv1.Code_CODE_UNSPECIFIED}
	default:
		c = rmqClass{FailedUnknown, rocketryv1.Code_CODE_UNSPECIFIED}
	}
	o := Outcome{Kind: c.kind, Code: c.code, WireCode: code}
	if o.Kind == Throttled {
		o.Reason = throttleReasonOf(msg)
	}
	return o
}

// throttleReasonOf reads the throttle reason from a status message, in the
// words rocketry's broker and ThrottleReason use.
func throttleReasonOf(msg string) rocketryv1.ThrottleReason {
	m := strings.ToUpper(msg)
	switch {
	case strings.Contains(m, "BACKLOG"):
		return rocketryv1.ThrottleReason_THROTTLE_REASON_BACKLOG
	case strings.Contains(m, "STORAGE_LOAD"):
		return rocketryv1.ThrottleReason_THROTTLE_REASON_STORAGE_LOAD
	case strings.Contains(m, "SEND_RATE"):
		return rocketryv1.ThrottleReason_THROTTLE_REASON_SEND_RATE
	}
	return rocketryv1.ThrottleReason_THROTTLE_REASON_UNSPECIFIED
}
