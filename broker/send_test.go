package broker_test

import (
	"fmt"
	"testing"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

func TestStoreAndReceiveInOrderPerQueue(t *testing.T) {
	b, c := start(t, brokerQueues(3))
	const n = 50
	resp := mustSend(t, c, msgs("orders", "a", n)...)
	if len(resp.Results) != n {
		t.Fatalf("SendMessage(%d) = %d results; want %d", n, len(resp.Results), n)
	}
	seen := map[int32]int64{}
	for i, r := range resp.Results {
		if want := fmt.Sprintf("a-%d", i); r.MessageId != want || r.Duplicate {
			t.Errorf("result %d = %q duplicate=%v; want %q, not duplicate", i, r.MessageId, r.Duplicate, want)
		}
		if r.Offset != seen[r.QueueId] {
			t.Errorf("result %d: queue %d offset %d; want %d", i, r.QueueId, r.Offset, seen[r.QueueId])
		}
		seen[r.QueueId]++
	}
	if len(seen) != 3 {
		t.Errorf("messages went to %d queues; want 3", len(seen))
	}
	var got []*rocketryv1.ReceivedMessage
	for len(got) < n {
		batch := receive(t, c, "orders", "g", 7)
		if len(batch) == 0 {
			break
		}
		got = append(got, batch...)
	}
	if len(got) != n {
		t.Fatalf("received %d messages; want %d", len(got), n)
	}
	next := map[int32]int64{}
	for _, m := range got {
		if m.Offset != next[m.QueueId] {
			t.Errorf("received queue %d offset %d; want offset %d", m.QueueId, m.Offset, next[m.QueueId])
		}
		next[m.QueueId]++
	}
	if extra := receive(t, c, "orders", "g", 7); len(extra) != 0 {
		t.Errorf("ReceiveMessages after the end = %d messages; want 0", len(extra))
	}
	if s := b.Stats(); s.Stored != n || s.Topics[0].Backlog != 0 {
		t.Errorf("Stats() stored %d backlog %d; want %d, 0", s.Stored, s.Topics[0].Backlog, n)
	}
	if ms := b.Messages("orders"); len(ms) != n {
		t.Errorf("Messages(orders) = %d; want %d", len(ms), n)
	}
}
