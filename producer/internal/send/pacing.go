package send

import (
	"strings"

	"github.com/rocketry-go/rocketry/brokercode"
	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/producer/internal/pace"
)

// This file reads an attempt's outcome as the pacer counts it
// (producer/internal/pace has the pacer, and says which scope a throttle
// belongs to): a refusal without a hint is its topic's, unless it names a
// state of the whole broker process:
//
//   - STORAGE_LOAD: the broker's disk and page cache, shared by its topics;
//   - RocketMQ's fast failure, "[TIMEOUT_CLEAN_QUEUE]" (a request waited in
//     the broker's send thread pool queue longer than
//     waitTimeMillsInSendQueue, 200 ms by default), "[PCBUSY_CLEAN_QUEUE]",
//     "[PC_SYNCHRONIZED]" (the page cache is busy) and "[REJECTREQUEST]"
//     (the pool is full), all SYSTEM_BUSY, all of one queue or page cache
//     per broker process
//     (broker/src/main/java/org/apache/rocketmq/broker/latency/BrokerFastFailure.java,
//     broker/src/main/java/org/apache/rocketmq/broker/processor/SendMessageProcessor.java).
//     Through a cluster-mode proxy the client sees only the proxy's answer,
//     and its pacer is the route's broker name: the closest scope it can
//     name.
//
// Those widen the scope to the endpoint (pace.ThrottledWide).

// paceResult is what the pacer counts of outcome o.
func paceResult(o outcome.Outcome) pace.Result {
	switch {
	case o.Kind == outcome.Stored:
		return pace.Stored
	case o.Kind == outcome.Throttled && o.Hint > 0:
		return pace.Hinted
	case o.Kind == outcome.Throttled && wideThrottle(o):
		return pace.ThrottledWide
	case o.Kind == outcome.Throttled:
		return pace.Throttled
	}
	return pace.Other
}

// wideThrottle reports whether a refusal names a state of the whole broker
// (see above), rather than of the topic.
func wideThrottle(o outcome.Outcome) bool {
	if o.Reason == brokercode.ReasonStorageLoad {
		return true
	}
	if o.Err == nil {
		return false
	}
	msg := o.Err.Error()
	for _, s := range wideMarks {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// wideMarks are RocketMQ's fast-failure texts (see above).
var wideMarks = []string{"[TIMEOUT_CLEAN_QUEUE]", "[PCBUSY_CLEAN_QUEUE]", "[PC_SYNCHRONIZED]", "[REJECTREQUEST]"}
