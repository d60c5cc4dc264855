package producer

import (
	wirermq "github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq"
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
// nearest brokercode.Code, its Err a *RocketMQStatusError.
var RocketMQClassifier Classifier = rmqClassifier{}

// rmqClassifier is the public face of RocketMQ 5's reading, which is
// producer/internal/wire/rocketmq's (wirermq.Classify, with its table of
// codes, rmqCodeClass): its outcome as it is (an outcome.Outcome), its error as
// the public one (a *RocketMQStatusError).
type rmqClassifier struct{}

func (rmqClassifier) Classify(reply any, err error) Outcome {
	o := wirermq.Classify(reply, err)
	o.Err = explainProtocol(o.Err)
	return o
}
