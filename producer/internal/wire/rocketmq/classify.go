// Package wirermq is the apache.rocketmq.v2 wire protocol (RocketMQ 5)
// under the producer: its client (connections, metadata, telemetry and
// Settings, heartbeats, routes), its transport (Transport, a
// wire.Transport), its attempter and batch sender, and what only RocketMQ
// 5 has: transactions (half messages, EndTransaction, the server's
// checks) and recall (wire.Transactions). Its outcomes are the executor's
// (outcome.Outcome); its errors are package senderr's (StatusError,
// AuthError, the sentinels), which the producer re-exports as they are.
package wirermq

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rocketry-go/rocketry/brokercode"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/outcome"
	wirev1 "github.com/rocketry-go/rocketry/producer/internal/wire/v1"
	"github.com/rocketry-go/rocketry/senderr"
)

// Classify reads the answer of an apache.rocketmq.v2 call, whose status is
// in the response body: producer.RocketMQClassifier's reading (whose doc
// says how), which the producer returns as it is. A gRPC
// error (err != nil) is read as producer.GRPCClassifier reads it
// (wirev1.Classify). The Err of a status that is not OK is a *senderr.StatusError.
func Classify(reply any, err error) outcome.Outcome {
	if err != nil {
		return wirev1.Classify(err)
	}
	switch r := reply.(type) {
	case *rocketmqv2.SendMessageResponse:
		return classifySend(r)
	case interface{ GetStatus() *rocketmqv2.Status }:
		return ClassifyStatus(r.GetStatus())
	}
	return outcome.Outcome{Kind: outcome.FailedUnknown, Err: fmt.Errorf("producer: rocketmq answer of type %T has no status", reply)}
}

// StatusOutcome is the reading of e, its Err e: the producer's errOutcome
// (IsThrottled, CodeOf) reads a RocketMQStatusError so.
func StatusOutcome(e *senderr.StatusError) outcome.Outcome {
	o := ClassifyCode(e.Code, e.Message)
	o.Err = e
	return o
}

// classifySend reads a SendMessageResponse of one message.
// A top-level MULTIPLE_RESULTS whose entries all say OK is Stored.
func classifySend(r *rocketmqv2.SendMessageResponse) outcome.Outcome {
	entries := r.GetEntries()
	allOK := len(entries) > 0
	for _, e := range entries {
		s := e.GetStatus()
		if s != nil && s.GetCode() != rocketmqv2.Code_OK {
			return ClassifyStatus(s)
		}
		allOK = allOK && s != nil
	}
	st := r.GetStatus()
	if st.GetCode() == rocketmqv2.Code_MULTIPLE_RESULTS && allOK {
		st = entries[0].GetStatus()
	}
	o := ClassifyStatus(st)
	if o.Kind == outcome.Stored && len(entries) == 0 {
		o = outcome.Outcome{Kind: outcome.FailedUnknown, WireCode: o.WireCode, Err: errors.New("producer: rocketmq answered OK without a result entry")}
	}
	return o
}

// ClassifyEntries classifies each of the n messages of one
// SendMessageRequest, for a batch. The shapes of the answer, as Apache's
// proxy makes them
// (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/producer/SendMessageActivity.java
// convertToSendMessageResponse, over the List<SendResult> of
// proxy/src/main/java/org/apache/rocketmq/proxy/service/message/ClusterMessageService.java
// or LocalMessageService.java):
//
//   - ONE entry for a request of several messages: the proxy sent them to
//     the broker as one SEND_BATCH_MESSAGE, which the broker stores whole or
//     not at all, and got one SendResult back. Its status is the status of
//     every message: OK says all n are stored (none may be sent again),
//     MASTER_PERSISTENCE_TIMEOUT and the like say all n are in the leader's
//     log. It is read as the official clients read an answer (a non-OK
//     entry's status, else the top-level status: rocketmq-clients'
//     java/client/src/main/java/org/apache/rocketmq/client/java/impl/producer/SendReceiptImpl.java).
//   - No entry: the proxy failed the call with an exception
//     (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/GrpcMessagingApplication.java
//     answers a status alone), true of the whole request; an OK status
//     without an entry is not a proxy's answer and is read as unknown.
//   - Any other count (n entries, as a server that answers each message,
//     such as the bundled broker's rocketry.v1 face): entry i by its own
//     status; an entry without a status, or a message without an entry, by
//     the top-level status when that is OK or a failure, and as
//     FailedUnknown when it is MULTIPLE_RESULTS or there is no entry (the
//     server said nothing of it).
func ClassifyEntries(r *rocketmqv2.SendMessageResponse, n int) []outcome.Outcome {
	out := make([]outcome.Outcome, n)
	entries := r.GetEntries()
	if n > 1 && len(entries) == 1 {
		o := classifySend(r)
		for i := range out {
			out[i] = o
		}
		return out
	}
	top := ClassifyStatus(r.GetStatus())
	multiple := r.GetStatus().GetCode() == rocketmqv2.Code_MULTIPLE_RESULTS
	for i := range out {
		switch {
		case i < len(entries) && entries[i].GetStatus() != nil:
			out[i] = ClassifyStatus(entries[i].GetStatus())
		case !multiple && (top.Kind != outcome.Stored || i < len(entries)):
			out[i] = top
		default:
			out[i] = outcome.Outcome{Kind: outcome.FailedUnknown, WireCode: top.WireCode,
				Err: fmt.Errorf("producer: rocketmq answered no status for message %d of %d (%d entries)", i, n, len(entries))}
		}
	}
	return out
}

// ClassifyStatus classifies one v2 status; nil reads as v2's CODE_UNSPECIFIED.
func ClassifyStatus(s *rocketmqv2.Status) outcome.Outcome {
	code, msg := int32(s.GetCode()), s.GetMessage()
	o := ClassifyCode(code, msg)
	if o.Kind != outcome.Stored {
		o.Err = &senderr.StatusError{Code: code, Message: msg}
	}
	return o
}

// rmqClass is a row of the code table.
type rmqClass struct {
	kind outcome.Kind
	code brokercode.Code
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
//	                                          Permanent. Except a 40300
//	      whose message is the proxy's "no writable queue"
//	      (rmqNoWritableQueue): FailedNotStored, UNAVAILABLE
//	40400 NOT_FOUND, 40402 TOPIC_NOT_FOUND    Permanent, TOPIC_NOT_FOUND
//	40401, 40403, 40404 (other not-founds)    Permanent
//	40800 REQUEST_TIMEOUT                     FailedUnknown: a timeout says
//	                                          nothing of the message
//	41300 PAYLOAD_TOO_LARGE, 41301 MESSAGE_BODY_TOO_LARGE,
//	43100, 43101 (headers, properties)        Permanent, MESSAGE_TOO_LARGE
//	41302 MESSAGE_BODY_EMPTY                  Permanent, BAD_REQUEST
//	42800 PRECONDITION_FAILED                 Permanent
//	42900 TOO_MANY_REQUESTS                   Throttled, TOO_MANY_REQUESTS;
//	                                          Reason from the message's busy
//	                                          tag or words (throttleReasonOf)
//	42901, 42902 lite topic/subscription quota
//	                                          Permanent: a quota, not a load
//	50000 INTERNAL_ERROR, 50001 INTERNAL_SERVER_ERROR
//	                                          FailedUnknown, INTERNAL_ERROR:
//	      a proxy answers these for any exception, including one raised
//	      after the broker wrote the message (a failed reply, a failed
//	      hook), so "not stored" cannot be read from them. (rocketry.v1's
//	      500 does say not stored; this one does not.) Except a 50001
//	      whose message carries a broker's busy tag: Throttled,
//	      TOO_MANY_REQUESTS, refused before it was written (rmqBusyTags)
//	50002 HA_NOT_AVAILABLE, 50401 MASTER_PERSISTENCE_TIMEOUT,
//	50402 SLAVE_PERSISTENCE_TIMEOUT           Stored (rmqUnconfirmed): the
//	      broker's SLAVE_NOT_AVAILABLE, FLUSH_DISK_TIMEOUT and
//	      FLUSH_SLAVE_TIMEOUT, which the proxy answers only for a write
//	      the broker made: the message is in the leader's log, its
//	      replication or flush was not confirmed. Sent again, it would be
//	      stored twice
//	50100 NOT_IMPLEMENTED                     Permanent
//	50400 PROXY_TIMEOUT                       FailedUnknown: the proxy gave
//	      up waiting; the broker may still store it
//	50500 UNSUPPORTED, 50501, 50502           Permanent
//	60000 FAILED_TO_CONSUME_MESSAGE           Permanent (not a send code)
//	other 429xx Throttled; other 4xxxx Permanent; anything else FailedUnknown
var rmqCodeClass = map[rocketmqv2.Code]rmqClass{
	rocketmqv2.Code_OK:                               {outcome.Stored, brokercode.Unspecified},
	rocketmqv2.Code_CODE_UNSPECIFIED:                 {outcome.FailedUnknown, brokercode.Unspecified},
	rocketmqv2.Code_MULTIPLE_RESULTS:                 {outcome.FailedUnknown, brokercode.Unspecified},
	rocketmqv2.Code_UNAUTHORIZED:                     {outcome.Permanent, brokercode.Unspecified},
	rocketmqv2.Code_PAYMENT_REQUIRED:                 {outcome.Permanent, brokercode.Unspecified},
	rocketmqv2.Code_FORBIDDEN:                        {outcome.Permanent, brokercode.Unspecified},
	rocketmqv2.Code_NOT_FOUND:                        {outcome.Permanent, brokercode.TopicNotFound},
	rocketmqv2.Code_TOPIC_NOT_FOUND:                  {outcome.Permanent, brokercode.TopicNotFound},
	rocketmqv2.Code_MESSAGE_NOT_FOUND:                {outcome.Permanent, brokercode.Unspecified},
	rocketmqv2.Code_CONSUMER_GROUP_NOT_FOUND:         {outcome.Permanent, brokercode.Unspecified},
	rocketmqv2.Code_OFFSET_NOT_FOUND:                 {outcome.Permanent, brokercode.Unspecified},
	rocketmqv2.Code_REQUEST_TIMEOUT:                  {outcome.FailedUnknown, brokercode.Unspecified},
	rocketmqv2.Code_PAYLOAD_TOO_LARGE:                {outcome.Permanent, brokercode.MessageTooLarge},
	rocketmqv2.Code_MESSAGE_BODY_TOO_LARGE:           {outcome.Permanent, brokercode.MessageTooLarge},
	rocketmqv2.Code_MESSAGE_BODY_EMPTY:               {outcome.Permanent, brokercode.BadRequest},
	rocketmqv2.Code_PRECONDITION_FAILED:              {outcome.Permanent, brokercode.Unspecified},
	rocketmqv2.Code_TOO_MANY_REQUESTS:                {outcome.Throttled, brokercode.TooManyRequests},
	rocketmqv2.Code_LITE_TOPIC_QUOTA_EXCEEDED:        {outcome.Permanent, brokercode.Unspecified},
	rocketmqv2.Code_LITE_SUBSCRIPTION_QUOTA_EXCEEDED: {outcome.Permanent, brokercode.Unspecified},
	rocketmqv2.Code_REQUEST_HEADER_FIELDS_TOO_LARGE:  {outcome.Permanent, brokercode.MessageTooLarge},
	rocketmqv2.Code_MESSAGE_PROPERTIES_TOO_LARGE:     {outcome.Permanent, brokercode.MessageTooLarge},
	rocketmqv2.Code_INTERNAL_ERROR:                   {outcome.FailedUnknown, brokercode.InternalError},
	rocketmqv2.Code_INTERNAL_SERVER_ERROR:            {outcome.FailedUnknown, brokercode.InternalError},
	rocketmqv2.Code_HA_NOT_AVAILABLE:                 {outcome.Stored, brokercode.Unspecified},
	rocketmqv2.Code_NOT_IMPLEMENTED:                  {outcome.Permanent, brokercode.Unspecified},
	rocketmqv2.Code_PROXY_TIMEOUT:                    {outcome.FailedUnknown, brokercode.Unspecified},
	rocketmqv2.Code_MASTER_PERSISTENCE_TIMEOUT:       {outcome.Stored, brokercode.Unspecified},
	rocketmqv2.Code_SLAVE_PERSISTENCE_TIMEOUT:        {outcome.Stored, brokercode.Unspecified},
	rocketmqv2.Code_UNSUPPORTED:                      {outcome.Permanent, brokercode.Unspecified},
	rocketmqv2.Code_VERSION_UNSUPPORTED:              {outcome.Permanent, brokercode.Unspecified},
	rocketmqv2.Code_VERIFY_FIFO_MESSAGE_UNSUPPORTED:  {outcome.Permanent, brokercode.Unspecified},
	rocketmqv2.Code_FAILED_TO_CONSUME_MESSAGE:        {outcome.Permanent, brokercode.Unspecified},
}

// rmqUnconfirmed reports whether code is one of the stored answers whose
// flush or replication the broker did not confirm: the proxy answers
// HA_NOT_AVAILABLE, MASTER_PERSISTENCE_TIMEOUT and
// SLAVE_PERSISTENCE_TIMEOUT for the broker's SLAVE_NOT_AVAILABLE,
// FLUSH_DISK_TIMEOUT and FLUSH_SLAVE_TIMEOUT
// (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/producer/SendMessageActivity.java
// convertToSendMessageResponse), which the broker answers after the
// message was appended to its commit log
// (store/src/main/java/org/apache/rocketmq/store/CommitLog.java
// handleDiskFlushAndHA: the flush or the replica's ack is waited for once
// the message is written). Such an entry carries no offset, message ID or
// transaction ID.
func rmqUnconfirmed(code int32) bool {
	switch rocketmqv2.Code(code) {
	case rocketmqv2.Code_HA_NOT_AVAILABLE, rocketmqv2.Code_MASTER_PERSISTENCE_TIMEOUT, rocketmqv2.Code_SLAVE_PERSISTENCE_TIMEOUT:
		return true
	}
	return false
}

// rmqNoWritableQueue reports whether a status is the proxy's refusal of a
// send for a topic none of whose queues it may write:
// proxy/src/main/java/org/apache/rocketmq/proxy/processor/ProducerProcessor.java
// sendMessage throws ProxyException(FORBIDDEN, "no writable queue") when
// its queue selector finds none (every broker of the topic has its write
// permission off, as in maintenance, or the route has no write queue),
// before anything is sent to a broker; the proxy answers it as 40300
// FORBIDDEN
// (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/common/GrpcProxyException.java
// CODE_MAPPING), its message the exception's text. It refuses no
// credential: the message is known not stored, and a later attempt may
// find a writable queue, as after a route without one (errNoWritableQueue).
func rmqNoWritableQueue(code int32, msg string) bool {
	return code == int32(rocketmqv2.Code_FORBIDDEN) && strings.Contains(msg, "no writable queue")
}

// ClassifyCode reads a v2 code and its status message; Err is left to the
// caller. A 50001 whose message carries one of the broker's busy tags
// (rmqBusyTags) is Throttled, not FailedUnknown: see rmqBusyTags. A 40300
// that is the proxy's "no writable queue" is FailedNotStored, not
// Permanent: see rmqNoWritableQueue.
func ClassifyCode(code int32, msg string) outcome.Outcome {
	switch code {
	case int32(rocketmqv2.Code_INTERNAL_SERVER_ERROR):
		if r, ok := busyReason(msg); ok {
			return outcome.Outcome{Kind: outcome.Throttled, Code: brokercode.TooManyRequests, WireCode: code, Reason: r}
		}
	case int32(rocketmqv2.Code_FORBIDDEN):
		if rmqNoWritableQueue(code, msg) {
			return outcome.Outcome{Kind: outcome.FailedNotStored, Code: brokercode.Unavailable, WireCode: code}
		}
	}
	c, ok := rmqCodeClass[rocketmqv2.Code(code)]
	switch {
	case ok:
	case code >= 40000 && code < 40100:
		c = rmqClass{outcome.Permanent, brokercode.BadRequest}
	case code >= 42900 && code < 43000:
		c = rmqClass{outcome.Throttled, brokercode.TooManyRequests}
	case code >= 40000 && code < 50000:
		c = rmqClass{outcome.Permanent, brokercode.Unspecified}
	default:
		c = rmqClass{outcome.FailedUnknown, brokercode.Unspecified}
	}
	o := outcome.Outcome{Kind: c.kind, Code: c.code, WireCode: code}
	if o.Kind == outcome.Throttled {
		o.Reason = throttleReasonOf(msg)
	}
	return o
}

// rmqBusyTags are the tags an Apache RocketMQ broker puts at the head of
// the remark of a send it refused for load, and the reason each is read
// as. Every one of them is answered before the message is written, so the
// message is known not stored:
//
//	[TIMEOUT_CLEAN_QUEUE]  the send waited in the broker's send queue over
//	                       waitTimeMillsInSendQueue (200 ms), and was taken
//	                       out of the queue unrun; the broker's send
//	                       capacity is spent: SEND_RATE
//	                       (broker/src/main/java/org/apache/rocketmq/broker/latency/BrokerFastFailure.java)
//	[PCBUSY_CLEAN_QUEUE]   the same, while the page cache is busy (the
//	                       commit log's lock held over 1 s): STORAGE_LOAD
//	                       (BrokerFastFailure.java)
//	[REJECTREQUEST]        the send processor refused the request before
//	                       it was queued (page cache busy, or no transient
//	                       store buffer): STORAGE_LOAD
//	                       (remoting/src/main/java/org/apache/rocketmq/remoting/netty/NettyRemotingAbstract.java)
//	[OVERLOAD]             the send thread pool's queue is full, the request
//	                       was not queued: SEND_RATE (NettyRemotingAbstract.java)
//	[PC_SYNCHRONIZED]      the store refused the put in checkStoreStatus,
//	                       before appending (OS_PAGECACHE_BUSY): STORAGE_LOAD
//	                       (store/src/main/java/org/apache/rocketmq/store/DefaultMessageStore.java,
//	                       broker/src/main/java/org/apache/rocketmq/broker/processor/SendMessageProcessor.java)
//
// The first four are the broker's SYSTEM_BUSY, which the proxy answers as
// 42900 (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/common/ResponseBuilder.java);
// [PC_SYNCHRONIZED] is the broker's SYSTEM_ERROR, answered as 50001 with
// its remark as the message. A proxy in local mode answers any refusal of
// its broker as 50001 with the remark
// (proxy/src/main/java/org/apache/rocketmq/proxy/service/message/LocalMessageService.java).
// So a 50001 that carries one of these tags is read as a throttle (not
// stored), and a 50001 without one stays FailedUnknown.
//
// The reasons are brokercode's Reason values (rocketry.v1's
// ThrottleReason), not new ones: the two causes (the broker's send
// capacity, its storage) are the ones those values name, and a new value
// would change rocketry.v1's wire contract for every broker and every
// metric label. The tag itself stays in the
// error's message (senderr.StatusError.Message) for whoever needs it.
var rmqBusyTags = []struct {
	tag    string
	reason brokercode.Reason
}{
	{"[TIMEOUT_CLEAN_QUEUE]", brokercode.ReasonSendRate},
	{"[PCBUSY_CLEAN_QUEUE]", brokercode.ReasonStorageLoad},
	{"[REJECTREQUEST]", brokercode.ReasonStorageLoad},
	{"[OVERLOAD]", brokercode.ReasonSendRate},
	{"[PC_SYNCHRONIZED]", brokercode.ReasonStorageLoad},
}

// busyReason reads a broker's busy tag in a status message: ok is false
// when it carries none.
func busyReason(msg string) (brokercode.Reason, bool) {
	if !strings.Contains(msg, "[") {
		return 0, false
	}
	for _, t := range rmqBusyTags {
		if strings.Contains(msg, t.tag) {
			return t.reason, true
		}
	}
	return 0, false
}

// throttleReasonOf reads the throttle reason from a status message: a
// broker's busy tag (rmqBusyTags), else the words rocketry's broker and
// brokercode.Reason use (BACKLOG, STORAGE_LOAD, SEND_RATE). A message with
// neither (the proxy's own "flow limit", a bare 42900) is UNSPECIFIED.
func throttleReasonOf(msg string) brokercode.Reason {
	if r, ok := busyReason(msg); ok {
		return r
	}
	m := strings.ToUpper(msg)
	switch {
	case strings.Contains(m, "BACKLOG"):
		return brokercode.ReasonBacklog
	case strings.Contains(m, "STORAGE_LOAD"):
		return brokercode.ReasonStorageLoad
	case strings.Contains(m, "SEND_RATE"):
		return brokercode.ReasonSendRate
	}
	return brokercode.ReasonUnspecified
}
