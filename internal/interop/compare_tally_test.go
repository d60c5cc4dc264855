package interop_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/rocketry-go/rocketry/broker"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/internal/bench"
)

// tally compares what a contender reported with what the broker stored
// and saw.
func tally(name string, outcomes []sendOutcome, stored []*rocketryv1.ReceivedMessage, records []broker.SendRecord) compareRow {
	row := compareRow{Contender: name, Messages: len(outcomes), Results: map[string]int{}, FailedBy: map[string]int{}, AttemptsPerMsg: map[int]int{}}
	times := map[string]int{}
	for _, m := range stored {
		times[m.GetMessage().GetMessageId()]++
	}
	mine := map[string]bool{}
	for _, o := range outcomes {
		if o.ID == "" {
			row.Unexpected = append(row.Unexpected, "a message without an id (no attempt carried it)")
			continue
		}
		mine[o.ID] = true
		row.Unknown += o.Unknown
		n := times[o.ID]
		if o.OK {
			row.Sent++
			if n == 0 {
				row.Lost++
			}
			continue
		}
		row.Failed++
		row.FailedBy[o.Err]++
		if n > 0 {
			row.FailedButStored++
		}
	}
	for id, n := range times {
		row.Stored++
		if n > 1 {
			row.StoredTwice++
		}
		if !mine[id] {
			row.Unexpected = append(row.Unexpected, "stored "+id)
		}
	}

	byID := map[string][]broker.SendRecord{}
	var first, last time.Time
	for _, r := range records {
		if r.Topic != compareTopic || r.Protocol != broker.ProtocolRocketMQV2 {
			continue
		}
		row.Attempts++
		row.Results[strings.TrimSuffix(r.Result+" "+r.Reason, " ")]++
		byID[r.MessageID] = append(byID[r.MessageID], r)
		if first.IsZero() || r.Time.Before(first) {
			first = r.Time
		}
		if r.Time.After(last) {
			last = r.Time
		}
	}
	row.Elapsed = last.Sub(first)
	for _, rs := range byID {
		row.AttemptsPerMsg[len(rs)]++
		slices.SortFunc(rs, func(a, b broker.SendRecord) int { return a.Time.Compare(b.Time) })
		for i := 1; i < len(rs); i++ {
			g := rs[i].Time.Sub(rs[i-1].Time)
			row.Gaps = append(row.Gaps, g)
			if rs[i-1].Result == broker.SendThrottled {
				row.GapsAfter429 = append(row.GapsAfter429, g)
			}
		}
	}
	slices.Sort(row.Gaps)
	slices.Sort(row.GapsAfter429)
	return row
}

// compareTable is rows as a markdown table.
func compareTable(rows []compareRow) string {
	var b strings.Builder
	b.WriteString("| contender | messages | reported sent | stored | attempts/stored | failed | lost | stored twice | copies (unknown outcomes) | failed but stored | refused 42900 (backlog+storage) | retries | gap p50 | gap p99 | gap after 42900 p50 | gap after 42900 p99 |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		aps := "-"
		if r.Stored > 0 {
			aps = fmt.Sprintf("%.2f", float64(r.Attempts)/float64(r.Stored))
		}
		backlog, storage := r.Results[broker.SendThrottled+" BACKLOG"], r.Results[broker.SendThrottled+" STORAGE_LOAD"]
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s | %d | %d | %d | %d (%d) | %d | %d (%d+%d) | %d | %s | %s | %s | %s |\n",
			r.Contender, r.Messages, r.Sent, r.Stored, aps, r.Failed, r.Lost, r.StoredTwice, r.Copies, r.Unknown, r.FailedButStored,
			backlog+storage, backlog, storage,
			len(r.Gaps), quantile(r.Gaps, 0.50), quantile(r.Gaps, 0.99), quantile(r.GapsAfter429, 0.50), quantile(r.GapsAfter429, 0.99))
	}
	return b.String()
}

// logDetails logs how a contender's run went, beyond the table.
func logDetails(t *testing.T, r compareRow) {
	t.Helper()
	t.Logf("%s: %d SendMessage entries in %v at the broker; consumer drained %d; the broker's results: %s",
		r.Contender, r.Attempts, r.Elapsed.Round(time.Millisecond), r.Drained, formatStrCounts(r.Results))
	t.Logf("%s: messages by attempts the broker saw: %s; failures reported: %s",
		r.Contender, formatCounts(r.AttemptsPerMsg), formatStrCounts(r.FailedBy))
}

// quantile is the q-quantile of sorted d (nearest rank), rounded for the
// table; "-" for none.
func quantile(d []time.Duration, q float64) string {
	if len(d) == 0 {
		return "-"
	}
	v := d[int(q*float64(len(d)-1))]
	switch {
	case v < time.Millisecond:
		return v.Round(time.Microsecond).String()
	case v < time.Second:
		return v.Round(100 * time.Microsecond).String()
	}
	return v.Round(time.Millisecond).String()
}

// prepareCompare creates the drain group, so that the backlog counts from
// the first message, and fills the archive topic the episode re-reads.
func prepareCompare(ctx context.Context, sc compareScenario, cc grpc.ClientConnInterface, consumer rocketryv1.ConsumerServiceClient) error {
	if _, err := consumer.ReceiveMessages(ctx, &rocketryv1.ReceiveMessagesRequest{Topic: compareTopic, Group: compareGroup, MaxMessages: 1, AutoCommit: true}); err != nil {
		return err
	}
	client := rocketryv1.NewMessagingServiceClient(cc)
	body := make([]byte, 100)
	for sent := 0; sent < sc.ArchiveMessages; {
		n := min(sc.ArchiveMessages-sent, broker.DefaultMaxBatch)
		req := &rocketryv1.SendMessageRequest{Messages: make([]*rocketryv1.Message, n)}
		for i := range req.Messages {
			req.Messages[i] = &rocketryv1.Message{MessageId: "archive-" + strconv.Itoa(sent+i), Topic: archiveTopic, Body: body}
		}
		if _, err := client.SendMessage(ctx, req); err != nil {
			return err
		}
		sent += n
	}
	return nil
}

// episode waits for b's first apache.rocketmq.v2 SendMessage (the Node
// client starts up before it sends), then sc.EpisodeAfter, resets the
// archive group to offset 0 and re-reads sc.EpisodeReads messages at
// sc.EpisodeReadRate.
func episode(ctx context.Context, sc compareScenario, b *broker.Broker, consumer rocketryv1.ConsumerServiceClient) error {
	if sc.EpisodeReads <= 0 || sc.EpisodeReadRate <= 0 {
		return nil
	}
	poll := time.NewTicker(time.Millisecond)
	for b.SendRequests(broker.ProtocolRocketMQV2) == 0 {
		select {
		case <-poll.C:
		case <-ctx.Done():
			poll.Stop()
			return nil
		}
	}
	poll.Stop()
	t := time.NewTimer(sc.EpisodeAfter)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return nil
	}
	return bench.ReRead(ctx, consumer, archiveTopic, archiveGroup, sc.EpisodeReads, sc.EpisodeReadRate, sc.DrainTick)
}
