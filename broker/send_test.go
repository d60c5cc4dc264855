package broker_test

import (
	"fmt"
	"github.com/rocketry-go/rocketry/broker"
	"google.golang.org/grpc/codes"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

func TestStoreAndReceiveInOrderPerQueue(t *testing.T) {
	b, c := start(t, broker.WithQueues(3))
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

func TestDuplicateAnswersTheOriginal(t *testing.T) {
	b, c := start(t)
	first := mustSend(t, c, msgs("t", "x", 5)...).Results
	again := mustSend(t, c, msg("t", "x-3"), msg("t", "new"), msg("t", "x-1")).Results
	for _, tc := range []struct {
		got  *rocketryv1.SendResult
		want *rocketryv1.SendResult
	}{{again[0], first[3]}, {again[2], first[1]}} {
		if !tc.got.Duplicate || tc.got.QueueId != tc.want.QueueId || tc.got.Offset != tc.want.Offset {
			t.Errorf("repeat of %s = queue %d offset %d duplicate=%v; want queue %d offset %d duplicate=true",
				tc.got.MessageId, tc.got.QueueId, tc.got.Offset, tc.got.Duplicate, tc.want.QueueId, tc.want.Offset)
		}
	}
	if again[1].Duplicate {
		t.Errorf("new id answered duplicate")
	}
	// The same id twice in one batch is stored once.
	twice := mustSend(t, c, msg("t", "y"), msg("t", "y")).Results
	if twice[0].Duplicate || !twice[1].Duplicate || twice[0].Offset != twice[1].Offset || twice[0].QueueId != twice[1].QueueId {
		t.Errorf("batch with an id twice = %v; want the second a duplicate of the first", twice)
	}
	s := b.Stats()
	if s.Stored != 7 || s.Duplicates != 3 {
		t.Errorf("Stats() stored %d duplicates %d; want 7, 3", s.Stored, s.Duplicates)
	}
	if n := len(b.Messages("t")); n != 7 {
		t.Errorf("Messages(t) = %d; want 7", n)
	}
}

func TestDedupWindow(t *testing.T) {
	clock := newFakeClock()
	_, c := start(t, broker.WithDedupWindow(2, time.Minute), broker.WithClock(clock.Now))
	mustSend(t, c, msg("t", "a"), msg("t", "b"), msg("t", "c")) // "a" falls out by count
	if r := mustSend(t, c, msg("t", "a")).Results[0]; r.Duplicate {
		t.Errorf("id beyond the count window answered duplicate")
	}
	if r := mustSend(t, c, msg("t", "c")).Results[0]; !r.Duplicate {
		t.Errorf("id within the window not answered duplicate")
	}
	clock.Advance(time.Minute)
	if r := mustSend(t, c, msg("t", "c")).Results[0]; r.Duplicate {
		t.Errorf("id older than the ttl answered duplicate")
	}
}

func TestValidationRefusals(t *testing.T) {
	b, c := start(t, broker.WithMaxBodyBytes(10), broker.WithMaxBatch(3))
	big := msg("t", "big")
	big.Body = make([]byte, 11)
	for _, tc := range []struct {
		name string
		ms   []*rocketryv1.Message
		code rocketryv1.Code
		want string
	}{
		{"empty request", nil, rocketryv1.Code_CODE_BAD_REQUEST, "no messages"},
		{"empty topic", []*rocketryv1.Message{msg("", "a")}, rocketryv1.Code_CODE_BAD_REQUEST, "message 0: empty topic"},
		{"missing id", []*rocketryv1.Message{msg("t", "a"), msg("t", "")}, rocketryv1.Code_CODE_BAD_REQUEST, "message 1: missing message_id"},
		{"mixed topics", []*rocketryv1.Message{msg("t", "a"), msg("u", "b")}, rocketryv1.Code_CODE_BAD_REQUEST, "message 1: topic"},
		{"too many", msgs("t", "m", 4), rocketryv1.Code_CODE_BAD_REQUEST, "4 messages; the most is 3"},
		{"body too large", []*rocketryv1.Message{msg("t", "a"), big}, rocketryv1.Code_CODE_MESSAGE_TOO_LARGE, "message 1"},
		{"topic with space", []*rocketryv1.Message{msg("a b", "a")}, rocketryv1.Code_CODE_BAD_REQUEST, "space"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := send(t, c, tc.ms...)
			st := wantRefusal(t, err, codes.InvalidArgument, tc.code, 0)
			if !strings.Contains(st.Message(), tc.want) {
				t.Errorf("SendMessage(%s) message = %q; want it to contain %q", tc.name, st.Message(), tc.want)
			}
		})
	}
	if s := b.Stats(); s.Stored != 0 || s.BadRequests != 7 {
		t.Errorf("Stats() stored %d bad requests %d; want 0, 7", s.Stored, s.BadRequests)
	}
}

func TestTopicNotFound(t *testing.T) {
	_, c := start(t, broker.WithAutoCreateTopics(false), broker.WithTopics("known"))
	mustSend(t, c, msg("known", "a"))
	_, err := send(t, c, msg("unknown", "a"))
	wantRefusal(t, err, codes.NotFound, rocketryv1.Code_CODE_TOPIC_NOT_FOUND, 0)
	_, err = c.ReceiveMessages(ctx(t), &rocketryv1.ReceiveMessagesRequest{Topic: "unknown", Group: "g"})
	wantRefusal(t, err, codes.NotFound, rocketryv1.Code_CODE_TOPIC_NOT_FOUND, 0)
}

func TestConsumerRefusals(t *testing.T) {
	_, c := start(t, broker.WithQueues(2))
	mustSend(t, c, msgs("t", "a", 4)...)
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"receive without group", func() error {
			_, err := c.ReceiveMessages(ctx(t), &rocketryv1.ReceiveMessagesRequest{Topic: "t"})
			return err
		}},
		{"receive negative max", func() error {
			_, err := c.ReceiveMessages(ctx(t), &rocketryv1.ReceiveMessagesRequest{Topic: "t", Group: "g", MaxMessages: -1})
			return err
		}},
		{"commit bad queue", func() error {
			_, err := c.CommitOffset(ctx(t), &rocketryv1.CommitOffsetRequest{Topic: "t", Group: "g", QueueId: 2})
			return err
		}},
		{"commit past head", func() error {
			_, err := c.CommitOffset(ctx(t), &rocketryv1.CommitOffsetRequest{Topic: "t", Group: "g", QueueId: 0, Offset: 3})
			return err
		}},
		{"reset negative", func() error {
			_, err := c.ResetOffset(ctx(t), &rocketryv1.ResetOffsetRequest{Topic: "t", Group: "g", Offset: -1})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantRefusal(t, tc.call(), codes.InvalidArgument, rocketryv1.Code_CODE_BAD_REQUEST, 0)
		})
	}
}

func TestCommitAndResetOffset(t *testing.T) {
	b, c := start(t, broker.WithQueues(2))
	mustSend(t, c, msgs("t", "a", 10)...)
	// Without auto-commit the same messages come back.
	req := &rocketryv1.ReceiveMessagesRequest{Topic: "t", Group: "g", MaxMessages: 2}
	r1, _ := c.ReceiveMessages(ctx(t), req)
	r2, _ := c.ReceiveMessages(ctx(t), req)
	if len(r1.Messages) != 2 || r1.Messages[0].Message.MessageId != r2.Messages[0].Message.MessageId {
		t.Fatalf("ReceiveMessages without commit = %v then %v; want the same 2 messages", r1.Messages, r2.Messages)
	}
	if _, err := c.CommitOffset(ctx(t), &rocketryv1.CommitOffsetRequest{Topic: "t", Group: "g", QueueId: 0, Offset: 5}); err != nil {
		t.Fatalf("CommitOffset = %v", err)
	}
	if got := b.Stats().Topics[0].Groups[0].Backlog; got != 5 {
		t.Errorf("backlog after committing queue 0 = %d; want 5", got)
	}
	if _, err := c.ResetOffset(ctx(t), &rocketryv1.ResetOffsetRequest{Topic: "t", Group: "g", Offset: 1_000}); err != nil {
		t.Fatalf("ResetOffset = %v", err)
	}
	if got := b.Stats().Topics[0].Backlog; got != 0 {
		t.Errorf("backlog after reset past the head = %d; want 0", got)
	}
	if _, err := c.ResetOffset(ctx(t), &rocketryv1.ResetOffsetRequest{Topic: "t", Group: "g", Offset: 0}); err != nil {
		t.Fatalf("ResetOffset = %v", err)
	}
	if got := len(receive(t, c, "t", "g", 100)); got != 10 {
		t.Errorf("receive after reset to 0 = %d messages; want 10", got)
	}
}

// Parallel producers retrying the same ids: each id is stored once.
func TestConcurrentSendsStoreEachIDOnce(t *testing.T) {
	b, c := start(t, broker.WithQueues(3))
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for i := 0; i < 100; i += 10 {
				ms := make([]*rocketryv1.Message, 0, 10)
				for j := i; j < i+10; j++ {
					ms = append(ms, msg("t", fmt.Sprintf("id-%d", j)))
				}
				if _, err := c.SendMessage(ctx(t), &rocketryv1.SendMessageRequest{Messages: ms}); err != nil {
					t.Errorf("SendMessage = %v", err)
				}
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	next := map[int32]int64{}
	for _, m := range b.Messages("t") {
		if seen[m.Message.MessageId] {
			t.Errorf("id %s stored twice", m.Message.MessageId)
		}
		seen[m.Message.MessageId] = true
		if m.Offset != next[m.QueueId] {
			t.Errorf("queue %d offset %d; want %d (no gaps)", m.QueueId, m.Offset, next[m.QueueId])
		}
		next[m.QueueId]++
	}
	if s := b.Stats(); len(seen) != 100 || s.Stored != 100 || s.Duplicates != 500 {
		t.Errorf("stored %d distinct (stats %d), duplicates %d; want 100, 100, 500", len(seen), s.Stored, s.Duplicates)
	}
}

func TestServeOnListener(t *testing.T) {
	b, err := broker.New()
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error)
	go func() { served <- b.Serve(lis) }()
	waitFor(t, func() bool { return b.Addr() == lis.Addr().String() })
	c := dial(t, b.Addr())
	mustSend(t, c, msg("t", "a"))
	if err := b.Serve(lis); err != broker.ErrServing {
		t.Errorf("second Serve = %v; want ErrServing", err)
	}
	if err := b.Restart(); err != nil {
		t.Fatalf("Restart() = %v", err)
	}
	sendAfterReconnect(t, c, msg("t", "b"))
	b.Stop()
	if err := <-served; err != nil {
		t.Errorf("Serve after Stop = %v; want nil", err)
	}
	if got := len(b.Messages("t")); got != 2 {
		t.Errorf("Messages = %d; want 2", got)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		opt  broker.Option
		want string
	}{
		{broker.WithQueues(0), "WithQueues"},
		{broker.WithMaxBodyBytes(0), "WithMaxBodyBytes"},
		{broker.WithMaxBatch(0), "WithMaxBatch"},
		{broker.WithDedupWindow(0, 0), "WithDedupWindow"},
		{broker.WithDedupWindow(1, -time.Second), "ttl"},
		{broker.WithTopics("a b"), "WithTopics"},
		{broker.WithLogger(nil), "WithLogger"},
		{broker.WithClock(nil), "WithClock"},
		{broker.WithThrottle(broker.Throttle{MaxBacklog: -1}), "MaxBacklog"},
		{broker.WithThrottle(broker.Throttle{MaxBacklog: 5, BacklogLowWater: 6}), "BacklogLowWater"},
		{broker.WithThrottle(broker.Throttle{MaxStorageLoad: -1}), "MaxStorageLoad"},
		{broker.WithFaults(broker.Faults{InternalRate: 1.5}), "InternalRate"},
		{broker.WithFaults(broker.Faults{InternalRate: 0.6, DropRate: 0.6}), "above 1"},
		{broker.WithFaults(broker.Faults{Latency: -1}), "Latency"},
	} {
		_, err := broker.New(tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "broker: ") {
			t.Errorf("New(...) = %v; want an error naming %s", err, tc.want)
		}
	}
}
