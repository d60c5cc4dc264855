package bench

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/rocketry-go/rocketry/broker"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// This file holds what runs beside a Scenario's senders: its consumer
// groups (the drain, the storage-load episode's re-read) and the samples
// and percentiles of its result.

// prepare creates the drain group (so that the backlog counts from the
// first message) and fills the archive topic the episode re-reads.
func (s Scenario) prepare(ctx context.Context, cc grpc.ClientConnInterface, consumer rocketryv1.ConsumerServiceClient) error {
	if _, err := consumer.ReceiveMessages(ctx, &rocketryv1.ReceiveMessagesRequest{Topic: scenarioTopic, Group: drainGroup, MaxMessages: 1, AutoCommit: true}); err != nil {
		return err
	}
	client := rocketryv1.NewMessagingServiceClient(cc)
	body := make([]byte, s.BodyBytes)
	ids := NewIDs("archive")
	for left := s.ArchiveMessages; left > 0; {
		n := min(left, broker.DefaultMaxBatch)
		req := &rocketryv1.SendMessageRequest{Messages: make([]*rocketryv1.Message, n)}
		for i := range req.Messages {
			req.Messages[i] = &rocketryv1.Message{MessageId: ids.Next(), Topic: archiveTopic, Body: body}
		}
		if _, err := client.SendMessage(ctx, req); err != nil {
			return err
		}
		left -= n
	}
	return nil
}

// drain consumes the topic at s.DrainRate (Drain).
func (s Scenario) drain(ctx context.Context, consumer rocketryv1.ConsumerServiceClient, consumed *atomic.Int64) error {
	return Drain(ctx, consumer, scenarioTopic, drainGroup, s.DrainRate, s.DrainBurst, s.DrainTick, consumed)
}

// Drain consumes topic as group at rate messages a second, every tick,
// adding what it read to consumed, until ctx ends: a token bucket with a
// burst of burst's worth, so that time with nothing to consume is lost,
// not saved up. Shared by the bench scenario and the Node.js comparison.
func Drain(ctx context.Context, consumer rocketryv1.ConsumerServiceClient, topic, group string, rate float64, burst, tick time.Duration, consumed *atomic.Int64) error {
	t := time.NewTicker(tick)
	defer t.Stop()
	most := rate * burst.Seconds()
	tokens, last := 0.0, time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			tokens = min(tokens+rate*now.Sub(last).Seconds(), most)
			last = now
			n := int32(tokens)
			if n < 1 {
				continue
			}
			resp, err := consumer.ReceiveMessages(ctx, &rocketryv1.ReceiveMessagesRequest{Topic: topic, Group: group, MaxMessages: n, AutoCommit: true})
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("bench: drain: %w", err)
			}
			got := len(resp.GetMessages())
			tokens -= float64(got)
			consumed.Add(int64(got))
		}
	}
}

// episode resets the archive group to 0 at s.EpisodeAt and re-reads
// s.EpisodeReads messages at s.EpisodeReadRate.
func (s Scenario) episode(ctx context.Context, consumer rocketryv1.ConsumerServiceClient, start time.Time) error {
	if s.EpisodeReads <= 0 || s.EpisodeReadRate <= 0 {
		return nil
	}
	t := time.NewTimer(time.Until(start.Add(s.EpisodeAt)))
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return nil
	}
	return ReRead(ctx, consumer, archiveTopic, archiveGroup, s.EpisodeReads, s.EpisodeReadRate, s.DrainTick)
}

// ReRead is a storage-load episode: it resets group's offset of topic to 0
// and re-reads reads messages at rate per second, in steps of tick, with
// auto-commit, until they are read, the topic has no more, or ctx ends (not
// an error).
func ReRead(ctx context.Context, consumer rocketryv1.ConsumerServiceClient, topic, group string, reads int, rate float64, tick time.Duration) error {
	if _, err := consumer.ResetOffset(ctx, &rocketryv1.ResetOffsetRequest{Topic: topic, Group: group, Offset: 0}); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("bench: episode: %w", err)
	}
	tk := time.NewTicker(tick)
	defer tk.Stop()
	t0 := time.Now()
	read := 0
	for read < reads {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tk.C:
			want := min(int(rate*now.Sub(t0).Seconds()), reads) - read
			if want < 1 {
				continue
			}
			resp, err := consumer.ReceiveMessages(ctx, &rocketryv1.ReceiveMessagesRequest{Topic: topic, Group: group, MaxMessages: int32(want), AutoCommit: true})
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("bench: episode: %w", err)
			}
			if len(resp.GetMessages()) == 0 {
				return nil
			}
			read += len(resp.GetMessages())
		}
	}
	return nil
}

// Sample is the broker's state at one moment of a run.
type Sample struct {
	AtMs          int64 `json:"at_ms"`
	Stored        int64 `json:"stored"`
	Consumed      int64 `json:"consumed"`
	Backlog       int64 `json:"backlog"`
	Requests      int64 `json:"requests"`
	Refused       int64 `json:"refused"`
	BacklogOn     bool  `json:"throttled_backlog"`
	StorageLoadOn bool  `json:"throttled_storage_load"`
}

func sample(b *broker.Broker, at time.Duration, consumed int64) Sample {
	st := b.Stats()
	sm := Sample{AtMs: at.Milliseconds(), Consumed: consumed, Requests: st.GetSendRequests(), StorageLoadOn: st.GetThrottledStorageLoad()}
	for _, v := range st.GetThrottled() {
		sm.Refused += v
	}
	for _, t := range st.GetTopics() {
		if t.GetTopic() == scenarioTopic {
			sm.Stored, sm.Backlog, sm.BacklogOn = t.GetStored(), t.GetBacklog(), t.GetThrottledBacklog()
		}
	}
	return sm
}

// topicStored is the scenario topic's stored count.
func topicStored(b *broker.Broker) int64 {
	for _, t := range b.Stats().GetTopics() {
		if t.GetTopic() == scenarioTopic {
			return t.GetStored()
		}
	}
	return 0
}

// percentileMs returns the p-quantile of d in milliseconds (sorting d).
func percentileMs(d []time.Duration, p float64) float64 {
	return float64(quantile(d, p)) / float64(time.Millisecond)
}

// quantile is the q-quantile of v (sorted in place), by the nearest rank
// below; 0 when v is empty.
func quantile[T int64 | float64 | time.Duration](v []T, q float64) T {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[int(q*float64(len(v)-1))]
}
