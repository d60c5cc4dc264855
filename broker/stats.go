package broker

import (
	"slices"
	"strings"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// throttleNames are the reason names of stats' throttled counts.
var throttleNames = map[rocketryv1.ThrottleReason]string{
	rocketryv1.ThrottleReason_THROTTLE_REASON_BACKLOG:      "BACKLOG",
	rocketryv1.ThrottleReason_THROTTLE_REASON_STORAGE_LOAD: "STORAGE_LOAD",
	rocketryv1.ThrottleReason_THROTTLE_REASON_SEND_RATE:    "SEND_RATE",
}

// Stats returns what the broker stored, refused and throttled, with every
// topic and group (sorted by name). Stored counts every copy; Copies counts
// the messages stored although their id was stored before and StoredTwice
// the ids stored more than once (0 and 0 while every send deduplicates).
// The throttled counts are keyed by "BACKLOG", "STORAGE_LOAD" and
// "SEND_RATE", and, with a send queue (WithSendQueue), "TIMEOUT_CLEAN_QUEUE"
// and "OVERLOAD"; the faults by "internal", "latency", "blackhole", "drop",
// "unavailable" and "stored_internal" (counted once stored); every key is
// present.
func (b *Broker) Stats() *rocketryv1.GetStatsResponse {
	now := b.now()
	s := &rocketryv1.GetStatsResponse{
		Stored:       b.stored.Load(),
		Duplicates:   b.duplicates.Load(),
		BadRequests:  b.badRequests.Load(),
		SendRequests: b.sendRequests.Load(),
		Throttled:    b.throttleCounts(),
		Faults:       map[string]int64{},
	}
	for k := faultInternal; k < numFaultKinds; k++ {
		s.Faults[faultNames[k]] = b.faultCount[k].Load()
	}
	s.StorageLoad, s.ThrottledStorageLoad = b.throttle.storageLoad(now)

	b.topicsMu.RLock()
	topics := make([]*topic, 0, len(b.topics))
	for _, t := range b.topics {
		topics = append(topics, t)
	}
	b.topicsMu.RUnlock()
	slices.SortFunc(topics, func(x, y *topic) int { return strings.Compare(x.name, y.name) })
	for _, t := range topics {
		t.mu.Lock()
		t.promoteLocked(now)
		ts := &rocketryv1.TopicStats{
			Topic:            t.name,
			Queues:           int32(len(t.queues)),
			Stored:           t.stored,
			Backlog:          t.backlogLocked(),
			ThrottledBacklog: t.backlog.throttled,
			Copies:           t.copies,
			StoredTwice:      t.twice,
		}
		for name, g := range t.groups {
			ts.Groups = append(ts.Groups, &rocketryv1.GroupStats{Group: name, Backlog: g.backlog})
		}
		t.mu.Unlock()
		s.Copies += ts.Copies
		s.StoredTwice += ts.StoredTwice
		slices.SortFunc(ts.Groups, func(x, y *rocketryv1.GroupStats) int { return strings.Compare(x.Group, y.Group) })
		s.Topics = append(s.Topics, ts)
	}
	return s
}

// SendRequests returns how many send requests the broker has had on
// protocol, ProtocolRocketryV1 or ProtocolRocketMQV2 (0 for another name).
// Stats counts the requests of both protocols together, as it counts
// their stored, duplicate, refused, throttled and faulted messages.
func (b *Broker) SendRequests(protocol string) int64 {
	v2 := b.sendRequestsV2.Load()
	switch protocol {
	case ProtocolRocketryV1:
		return b.sendRequests.Load() - v2
	case ProtocolRocketMQV2:
		return v2
	}
	return 0
}
