package broker_test

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/rocketry-go/rocketry/broker"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

const (
	reasonBacklog  = rocketryv1.ThrottleReason_THROTTLE_REASON_BACKLOG
	reasonStorage  = rocketryv1.ThrottleReason_THROTTLE_REASON_STORAGE_LOAD
	reasonSendRate = rocketryv1.ThrottleReason_THROTTLE_REASON_SEND_RATE
	code530        = rocketryv1.Code_CODE_TOO_MANY_REQUESTS
)

func TestBacklogThrottleWithHysteresis(t *testing.T) {
	b, c := start(t, broker.WithQueues(2), broker.WithThrottle(broker.Throttle{MaxBacklog: 10, BacklogLowWater: 5}))
	// Without groups the backlog is 0: nothing throttles.
	fill(t, c, "t", "early", 20)
	if got := b.Stats().Topics[0].Backlog; got != 0 {
		t.Fatalf("backlog without groups = %d; want 0", got)
	}
	// A new group starts at offset 0: it is 20 behind, over the maximum.
	if got := len(receive(t, c, "t", "g", 9)); got != 9 {
		t.Fatalf("receive = %d; want 9", got)
	}
	// Backlog 11 > 10: refused, the whole batch.
	_, err := send(t, c, msgs("t", "refused", 3)...)
	st := wantRefusal(t, err, codes.ResourceExhausted, code530, reasonBacklog)
	if d, ok := retryDelay(st); !ok || d <= 0 {
		t.Errorf("BACKLOG refusal RetryInfo = %v, %v; want a positive delay", d, ok)
	}
	if s := b.Stats(); s.Stored != 20 || !s.Topics[0].ThrottledBacklog || s.Throttled["BACKLOG"] != 1 {
		t.Errorf("Stats() stored %d throttled_backlog %v throttled %v; want 20, true, BACKLOG 1", s.Stored, s.Topics[0].ThrottledBacklog, s.Throttled)
	}
	// Backlog 8: under the maximum but over the low-water mark: still refused.
	receive(t, c, "t", "g", 3)
	_, err = send(t, c, msg("t", "still-refused"))
	wantRefusal(t, err, codes.ResourceExhausted, code530, reasonBacklog)
	// Backlog 5: at the low-water mark: accepted again.
	receive(t, c, "t", "g", 3)
	mustSend(t, c, msgs("t", "accepted", 5)...) // backlog 10: not over
	mustSend(t, c, msg("t", "eleven"))          // backlog 11 now
	_, err = send(t, c, msg("t", "over-again"))
	wantRefusal(t, err, codes.ResourceExhausted, code530, reasonBacklog)
	if s := b.Stats(); s.Throttled["BACKLOG"] != 3 || s.Stored != 26 {
		t.Errorf("Stats() throttled %v stored %d; want BACKLOG 3, 26", s.Throttled, s.Stored)
	}
	// Thresholds change at run time.
	b.SetThrottle(broker.Throttle{})
	mustSend(t, c, msg("t", "unthrottled"))
	if b.Stats().Topics[0].ThrottledBacklog {
		t.Errorf("throttled_backlog still true after SetThrottle(Throttle{})")
	}
}

func TestStorageLoadThrottle(t *testing.T) {
	clock := newFakeClock()
	b, c := start(t, broker.WithQueues(1), broker.WithClock(clock.Now), broker.WithThrottle(broker.Throttle{
		ColdReadDistance: 10, MaxStorageLoad: 5, StorageLoadWindow: time.Second,
	}))
	// A group reading at the head as messages arrive reads nothing cold.
	receive(t, c, "t", "live", 1)
	for i := range 10 {
		fill(t, c, "t", "m"+string(rune('a'+i)), 10)
		if got := len(receive(t, c, "t", "live", 10)); got != 10 {
			t.Fatalf("live receive = %d; want 10", got)
		}
	}
	if s := b.Stats(); s.StorageLoad != 0 || s.ThrottledStorageLoad {
		t.Fatalf("Stats() storage load %v throttled %v with groups at the head; want 0, false", s.StorageLoad, s.ThrottledStorageLoad)
	}
	// A group reset to 0 on the 100-message log reads 32 cold messages.
	if _, err := c.ResetOffset(ctx(t), &rocketryv1.ResetOffsetRequest{Topic: "t", Group: "replay", Offset: 0}); err != nil {
		t.Fatalf("ResetOffset = %v", err)
	}
	receive(t, c, "t", "replay", 32)
	if s := b.Stats(); s.StorageLoad != 32 || !s.ThrottledStorageLoad {
		t.Fatalf("Stats() storage load %v throttled %v after 32 cold reads; want 32, true", s.StorageLoad, s.ThrottledStorageLoad)
	}
	_, err := send(t, c, msgs("t", "refused", 2)...)
	st := wantRefusal(t, err, codes.ResourceExhausted, code530, reasonStorage)
	if d, ok := retryDelay(st); !ok || d != time.Second {
		t.Errorf("STORAGE_LOAD RetryInfo = %v, %v; want 1s", d, ok)
	}
	// The live group keeps reading at the head: no cold reads.
	clock.Advance(500 * time.Millisecond)
	receive(t, c, "t", "live", 10)
	_, err = send(t, c, msg("t", "refused-2"))
	wantRefusal(t, err, codes.ResourceExhausted, code530, reasonStorage)
	// The re-read catches up: offsets 32..88 are cold, 89..99 are not.
	clock.Advance(500 * time.Millisecond)
	if got := len(receive(t, c, "t", "replay", 1000)); got != 68 {
		t.Fatalf("replay receive = %d; want 68", got)
	}
	if got := b.Stats().StorageLoad; got != 57 {
		t.Errorf("storage load = %v; want 57", got)
	}
	// The re-read has ended; once the window passes, sends are accepted.
	clock.Advance(time.Second)
	mustSend(t, c, msg("t", "accepted"))
	if s := b.Stats(); s.Throttled["STORAGE_LOAD"] != 2 || s.ThrottledStorageLoad || s.Stored != 101 {
		t.Errorf("Stats() throttled %v storage throttled %v stored %d; want STORAGE_LOAD 2, false, 101", s.Throttled, s.ThrottledStorageLoad, s.Stored)
	}
}

func TestSendRateThrottle(t *testing.T) {
	clock := newFakeClock()
	b, c := start(t, broker.WithClock(clock.Now), broker.WithThrottle(broker.Throttle{MaxSendRate: 10}))
	mustSend(t, c, msgs("t", "a", 10)...)
	_, err := send(t, c, msg("t", "b"))
	st := wantRefusal(t, err, codes.ResourceExhausted, code530, reasonSendRate)
	if d, ok := retryDelay(st); !ok || d != 100*time.Millisecond {
		t.Errorf("SEND_RATE RetryInfo = %v, %v; want 100ms", d, ok)
	}
	clock.Advance(100 * time.Millisecond)
	mustSend(t, c, msg("t", "b"))
	if got := b.Stats().Throttled["SEND_RATE"]; got != 1 {
		t.Errorf("throttled SEND_RATE = %d; want 1", got)
	}
}

// TestBacklogHintUsesDrainRateWhileThrottled pins the BACKLOG RetryInfo
// hint: (backlog - low water) / drain rate + the time between commits,
// measured while the topic is throttled, so that time the consumer sat idle before the spell
// does not make the hint too long.
func TestBacklogHintUsesDrainRateWhileThrottled(t *testing.T) {
	clock := newFakeClock()
	b, c := start(t, broker.WithQueues(1), broker.WithClock(clock.Now), broker.WithThrottle(broker.Throttle{
		MaxBacklog: 10, BacklogLowWater: 5, StorageLoadWindow: time.Second,
	}))
	hint := func(id string) time.Duration {
		t.Helper()
		_, err := send(t, c, msg("t", id))
		d, ok := retryDelay(wantRefusal(t, err, codes.ResourceExhausted, code530, reasonBacklog))
		if !ok {
			t.Fatalf("SendMessage(%q) refusal has no RetryInfo; want one", id)
		}
		return d
	}
	wantHint := func(id string, want time.Duration) {
		t.Helper()
		if got := hint(id); (got - want).Abs() > time.Microsecond {
			t.Errorf("SendMessage(%q) RetryInfo = %v; want %v", id, got, want)
		}
	}
	receive(t, c, "t", "g", 1) // the group, at offset 0
	// 0-100 ms: the consumer drains 1000/s, keeping up with the sends.
	for i := range 10 {
		fill(t, c, "t", fmt.Sprintf("busy%d", i), 10)
		clock.Advance(10 * time.Millisecond)
		if got := len(receive(t, c, "t", "g", 10)); got != 10 {
			t.Fatalf("receive = %d; want 10", got)
		}
	}
	// 100-600 ms: nothing to consume. At 600 ms a burst of 30: backlog 30.
	clock.Advance(500 * time.Millisecond)
	fill(t, c, "t", "burst", 30)
	// Nothing consumed yet in this spell, and no spell before it: the rate
	// of the window, counted from the first commit (at 10 ms): 100 in 590 ms,
	// 147.5 ms (over the whole window: 250 ms).
	wantHint("first", time.Duration(25.0/(100.0/0.59)*float64(time.Second)))
	// 20 ms into the spell, 20 consumed in commits 10 ms apart: 1000/s;
	// excess 10-5: 5 ms, plus a step for the commit to come: 15 ms. The
	// window's rate (120/s) would say 41.7 ms.
	for range 2 {
		clock.Advance(10 * time.Millisecond)
		receive(t, c, "t", "g", 10)
	}
	wantHint("in-spell", 15*time.Millisecond)
	// Under the low-water mark the spell ends: 30 in 30 ms, 3 commits.
	clock.Advance(10 * time.Millisecond)
	receive(t, c, "t", "g", 10)
	if s := b.Stats(); s.Topics[0].ThrottledBacklog {
		t.Fatalf("throttled_backlog = true at backlog %d; want false", s.Topics[0].Backlog)
	}
	// 500 ms idle, then a new spell: the last spell's drain, 1000/s in
	// steps of 10 ms, for an excess of 15: 25 ms. The window's rate
	// (30/s) would say 500 ms.
	clock.Advance(500 * time.Millisecond)
	fill(t, c, "t", "burst2", 20) // backlog 20
	wantHint("next-spell", 25*time.Millisecond)
	// The consumer stops: nothing drains in this spell, the hint is the
	// window.
	clock.Advance(50 * time.Millisecond)
	wantHint("stalled", time.Second)
}
