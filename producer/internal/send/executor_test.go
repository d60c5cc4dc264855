package send

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/brokercode"
	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/producer/internal/pace"
)

// This file tests the executor alone; the retry table, read from real
// wire answers through the classifiers, is the producer's TestDecide.

// testConfig is the producer's default policy: 3 attempts of 3 s, the
// failure schedule Immediate.
func testConfig() Config {
	return Config{MaxAttempts: 3, AttemptTimeout: 3 * time.Second, Failure: backoff.Immediate, Logger: slog.New(slog.DiscardHandler)}
}

// TestDecideCountsEachScheduleApart checks the numbering of the schedules:
// a failure between throttles neither resets nor advances the throttle
// schedule.
func TestDecideCountsEachScheduleApart(t *testing.T) {
	c := testConfig()
	c.MaxAttempts, c.Rand = 10, nil
	c.Throttle = scheduleFunc(func(n int) time.Duration { return time.Duration(n) * time.Millisecond })
	c.Failure = scheduleFunc(func(n int) time.Duration { return time.Duration(100*n) * time.Millisecond })
	x := &Executor{Cfg: &c}
	now := time.Now()
	var got []time.Duration
	// 530, 530, 503, 530, 503 as the classifiers read them.
	for _, k := range []outcome.Kind{outcome.Throttled, outcome.Throttled, outcome.FailedNotStored, outcome.Throttled, outcome.FailedNotStored} {
		x.attempts++
		d := x.Decide(context.Background(), outcome.Outcome{Kind: k}, false, now, now)
		got = append(got, d.Delay)
	}
	want := []time.Duration{1 * time.Millisecond, 2 * time.Millisecond, 100 * time.Millisecond, 3 * time.Millisecond, 200 * time.Millisecond}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("delays = %v; want %v", got, want)
	}
}

type scheduleFunc func(n int) time.Duration

func (f scheduleFunc) Delay(n int, _ backoff.Rand) (time.Duration, bool) { return f(n), n >= 1 }

// TestDecideScheduleEnd: a schedule without retry n ends the send.
func TestDecideScheduleEnd(t *testing.T) {
	p, err := backoff.NewDeliveryPolicy(backoff.HealthyRetryPolicy{MinDelayTarget: 1, MaxDelayTarget: 1, NumRetries: 1, BackoffFunction: backoff.Linear})
	if err != nil {
		t.Fatalf("NewDeliveryPolicy: %v", err)
	}
	c := testConfig()
	c.MaxAttempts, c.Throttle = 10, p
	x := &Executor{Cfg: &c, attempts: 2, throttles: 1}
	now := time.Now()
	if got := x.Decide(context.Background(), outcome.Outcome{Kind: outcome.Throttled, Code: brokercode.TooManyRequests}, false, now, now); got.Act != Fail || got.End != EndAttemptsExhausted {
		t.Errorf("Decide after the schedule's last retry = %+v; want fail with EndAttemptsExhausted", got)
	}
}

// TestStoppedByClose: a send stopped with Config.Closed as its context's
// cause ends EndClosed; with another cause, EndContext and that cause.
func TestStoppedByClose(t *testing.T) {
	closed := errors.New("closed")
	c := testConfig()
	c.Closed = closed
	x := &Executor{Cfg: &c}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(fmt.Errorf("wrapped: %w", closed))
	assert.Equal(t, Decision{Act: Fail, End: EndClosed}, x.Decide(ctx, outcome.Outcome{Kind: outcome.FailedUnknown}, false, time.Now(), time.Now()))
	ctx, cancel2 := context.WithCancel(context.Background())
	cancel2()
	assert.Equal(t, Decision{Act: Fail, End: EndContext, Cause: context.Canceled, CtxErr: context.Canceled}, x.Decide(ctx, outcome.Outcome{Kind: outcome.FailedUnknown}, false, time.Now(), time.Now()))
}

// TestRetryBudget follows gRPC's retry throttling arithmetic.
func TestRetryBudget(t *testing.T) {
	var nilBudget *Budget
	if nilBudget.throttle() {
		t.Errorf("nil budget throttle() = true; want false")
	}
	nilBudget.success()
	b := NewBudget(4, 0.5)
	// 4 -> 3 (allowed), 3 -> 2 (2 <= 2: refused).
	if got := b.throttle(); got {
		t.Errorf("throttle() at 3 tokens = true; want false")
	}
	if got := b.throttle(); !got {
		t.Errorf("throttle() at 2 tokens = false; want true")
	}
	b.success() // 2.5
	if got := b.throttle(); !got {
		t.Errorf("throttle() at 1.5 tokens = false; want true")
	}
	for range 10 {
		b.success()
	}
	if b.tokens != 4 {
		t.Errorf("tokens after many successes = %v; want 4 (the maximum)", b.tokens)
	}
}

// TestPaceResult: what the pacer counts of each outcome; a refusal that
// names the broker's state ([TIMEOUT_CLEAN_QUEUE], STORAGE_LOAD) paces
// every topic of the endpoint (pace's TestPacerScope).
func TestPaceResult(t *testing.T) {
	// The texts of gRPC errors as the producer's tests make them.
	busy := errors.New("rpc error: code = ResourceExhausted desc = test: CODE_TOO_MANY_REQUESTS")
	err530, err500 := busy, errors.New("rpc error: code = Internal desc = test: CODE_INTERNAL_ERROR")
	assert.False(t, wideThrottle(outcome.Outcome{Kind: outcome.Throttled, Err: busy}))
	assert.True(t, wideThrottle(outcome.Outcome{Kind: outcome.Throttled, Err: errors.New("42900 [TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while")}))
	assert.True(t, wideThrottle(outcome.Outcome{Kind: outcome.Throttled, Reason: brokercode.ReasonStorageLoad}))
	for _, c := range []struct {
		o    outcome.Outcome
		want pace.Result
	}{
		{outcome.Outcome{Kind: outcome.Stored}, pace.Stored},
		{outcome.Outcome{Kind: outcome.Throttled, Reason: brokercode.ReasonBacklog, Err: err530}, pace.Throttled},
		{outcome.Outcome{Kind: outcome.Throttled, Err: errors.New("[TIMEOUT_CLEAN_QUEUE]broker busy")}, pace.ThrottledWide},
		{outcome.Outcome{Kind: outcome.Throttled, Reason: brokercode.ReasonStorageLoad}, pace.ThrottledWide},
		{outcome.Outcome{Kind: outcome.Throttled, Hint: time.Second, Err: errors.New("[TIMEOUT_CLEAN_QUEUE]broker busy")}, pace.Hinted},
		{outcome.Outcome{Kind: outcome.FailedUnknown, Err: err500}, pace.Other},
	} {
		assert.Equal(t, c.want, paceResult(c.o), "paceResult(%+v)", c.o)
	}
}

// TestReach: a request that reached its broker is recent for ReachWindow;
// a nil Reach always is.
func TestReach(t *testing.T) {
	var none *Reach
	assert.True(t, none.recent(time.Now()))
	none.sent(time.Now())
	var r Reach
	now := time.Now()
	assert.False(t, r.recent(now), "never reached")
	r.sent(now)
	assert.True(t, r.recent(now.Add(ReachWindow-time.Second)))
	assert.False(t, r.recent(now.Add(ReachWindow)))
}
