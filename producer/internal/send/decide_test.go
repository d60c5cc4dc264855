package send_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/broker"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/producer/internal/send"
	wirev1 "github.com/rocketry-go/rocketry/producer/internal/wire/v1"
	"github.com/rocketry-go/rocketry/senderr"
)

// This file reads the retry table from real wire answers (the classifier
// of rocketry.v1) in an external test package, which the executor's
// package cannot import; export_test.go gives it the attempts made.

// defaultConfig is the producer's default policy (producer/options.go).
func defaultConfig() send.Config {
	return send.Config{MaxAttempts: 3, AttemptTimeout: 3 * time.Second, Failure: backoff.Immediate, Closed: senderr.ErrClosed}
}

// msSchedule is the gRPC connection backoff in milliseconds: 2 ms, x2.
func msSchedule(t testing.TB) *backoff.Connection {
	t.Helper()
	c, err := backoff.NewConnection(backoff.Config{BaseDelay: 2 * time.Millisecond, Multiplier: 2, Jitter: 0.2, MaxDelay: 50 * time.Millisecond, MinConnectTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// brokerErr is a rocketry.v1 broker's error status.
func brokerErr(gc codes.Code, code rocketryv1.Code, reason rocketryv1.ThrottleReason, hint time.Duration) error {
	return broker.StatusError(gc, code, reason, hint, "test: "+code.String())
}

var (
	err530 = brokerErr(codes.ResourceExhausted, rocketryv1.Code_CODE_TOO_MANY_REQUESTS, rocketryv1.ThrottleReason_THROTTLE_REASON_BACKLOG, 0)
	err500 = brokerErr(codes.Internal, rocketryv1.Code_CODE_INTERNAL_ERROR, 0, 0)
	err503 = brokerErr(codes.Unavailable, rocketryv1.Code_CODE_UNAVAILABLE, 0, 0)
	err400 = brokerErr(codes.InvalidArgument, rocketryv1.Code_CODE_BAD_REQUEST, 0, 0)
)

// TestDecide pins the retry-decision table (docs/retries.md's, in
// Decide), from real wire answers as rocketry.v1's classifier reads them.
func TestDecide(t *testing.T) {
	t.Parallel()
	conn := msSchedule(t)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	// decide reads the deadline, not the clock: attempts "start" 3 ms
	// before a deadline an hour away.
	base := time.Now()
	t0 := base.Add(time.Hour - 3*time.Millisecond)
	soon, cancelSoon := context.WithDeadline(context.Background(), base.Add(time.Hour))
	defer cancelSoon()
	later, cancelLater := context.WithDeadline(context.Background(), base.Add(2*time.Hour))
	defer cancelLater()
	closed, closeIt := context.WithCancelCause(context.Background())
	closeIt(senderr.ErrClosed)
	hinted := brokerErr(codes.ResourceExhausted, rocketryv1.Code_CODE_TOO_MANY_REQUESTS, rocketryv1.ThrottleReason_THROTTLE_REASON_STORAGE_LOAD, 30*time.Millisecond)

	tests := []struct {
		name          string
		ctx           context.Context
		err           error
		transactional bool
		unsent        bool // the request never left the client
		attempts      int  // attempts made so far, this one included
		throttles     int  // throttles before this attempt
		elapsed       time.Duration
		maxAttempts   int
		want          decision
	}{
		{name: "ok", err: nil, want: decision{act: actDone}},
		{name: "530 retries on the throttle schedule", err: err530, attempts: 1, want: decision{act: actRetry, throttled: true, delay: 2 * time.Millisecond, wait: 2 * time.Millisecond, timeout: 3 * time.Second}},
		{name: "third throttle is retry 3", err: err530, attempts: 3, throttles: 2, maxAttempts: 5, want: decision{act: actRetry, throttled: true, delay: 8 * time.Millisecond, wait: 8 * time.Millisecond, timeout: 3 * time.Second}},
		{name: "delay counts from the attempt's start", err: err530, attempts: 1, elapsed: 1500 * time.Microsecond, want: decision{act: actRetry, throttled: true, delay: 2 * time.Millisecond, wait: 500 * time.Microsecond, timeout: 3 * time.Second}},
		{name: "attempt longer than the delay: no wait", err: err530, attempts: 1, elapsed: 5 * time.Millisecond, want: decision{act: actRetry, throttled: true, delay: 2 * time.Millisecond, timeout: 3 * time.Second}},
		{name: "RetryInfo lengthens the wait", err: hinted, attempts: 1, elapsed: time.Millisecond, want: decision{act: actRetry, throttled: true, delay: 31 * time.Millisecond, wait: 30 * time.Millisecond, timeout: 3 * time.Second}},
		{name: "bare RESOURCE_EXHAUSTED is throttling", err: status.Error(codes.ResourceExhausted, "slow down"), attempts: 1, want: decision{act: actRetry, throttled: true, delay: 2 * time.Millisecond, wait: 2 * time.Millisecond, timeout: 3 * time.Second}},
		{name: "transactional 530 retries", err: err530, transactional: true, attempts: 1, want: decision{act: actRetry, throttled: true, delay: 2 * time.Millisecond, wait: 2 * time.Millisecond, timeout: 3 * time.Second}},
		{name: "broker's 503 retries at once elsewhere", err: err503, attempts: 1, want: decision{act: actRetry, timeout: 3 * time.Second, failover: true}},
		{name: "broker's 500 retries at once elsewhere", err: err500, attempts: 1, want: decision{act: actRetry, timeout: 3 * time.Second, failover: true}},
		{name: "bare UNAVAILABLE (outcome unknown) stays", err: status.Error(codes.Unavailable, "transport is closing"), attempts: 1, want: decision{act: actRetry, timeout: 3 * time.Second}},
		{name: "bare INTERNAL (outcome unknown) stays", err: status.Error(codes.Internal, "?"), attempts: 1, want: decision{act: actRetry, timeout: 3 * time.Second}},
		{name: "request never sent retries elsewhere", err: status.Error(codes.Unavailable, "connection refused"), unsent: true, attempts: 1, want: decision{act: actRetry, timeout: 3 * time.Second, failover: true}},
		{name: "transactional never sent retries elsewhere", err: status.Error(codes.Unavailable, "connection refused"), unsent: true, transactional: true, attempts: 1, want: decision{act: actRetry, timeout: 3 * time.Second, failover: true}},
		{name: "UNKNOWN retries", err: status.Error(codes.Unknown, "?"), attempts: 1, want: decision{act: actRetry, timeout: 3 * time.Second}},
		{name: "ABORTED retries", err: status.Error(codes.Aborted, "?"), attempts: 1, want: decision{act: actRetry, timeout: 3 * time.Second}},
		{name: "the attempt's own timeout retries", err: status.Error(codes.DeadlineExceeded, "attempt"), attempts: 1, want: decision{act: actRetry, timeout: 3 * time.Second}},
		{name: "lost connection retries", err: status.Error(codes.Canceled, "grpc: the client connection is closing"), attempts: 1, want: decision{act: actRetry, timeout: 3 * time.Second}},
		{name: "non-status error is a failure", err: io.ErrUnexpectedEOF, attempts: 1, want: decision{act: actRetry, timeout: 3 * time.Second}},
		{name: "transactional timeout is never retried", err: status.Error(codes.DeadlineExceeded, "attempt"), transactional: true, attempts: 1, want: decision{act: actFail, kind: senderr.ErrNotRetryable}},
		{name: "transactional 500 is never retried", err: err500, transactional: true, attempts: 1, want: decision{act: actFail, kind: senderr.ErrNotRetryable}},
		{name: "400 is never retried", err: err400, attempts: 1, want: decision{act: actFail, kind: senderr.ErrNotRetryable}},
		{name: "NOT_FOUND", err: status.Error(codes.NotFound, "?"), attempts: 1, want: decision{act: actFail, kind: senderr.ErrNotRetryable}},
		{name: "PERMISSION_DENIED", err: status.Error(codes.PermissionDenied, "?"), attempts: 1, want: decision{act: actFail, kind: senderr.ErrNotRetryable}},
		{name: "UNAUTHENTICATED", err: status.Error(codes.Unauthenticated, "?"), attempts: 1, want: decision{act: actFail, kind: senderr.ErrNotRetryable}},
		{name: "FAILED_PRECONDITION", err: status.Error(codes.FailedPrecondition, "?"), attempts: 1, want: decision{act: actFail, kind: senderr.ErrNotRetryable}},
		{name: "OUT_OF_RANGE", err: status.Error(codes.OutOfRange, "?"), attempts: 1, want: decision{act: actFail, kind: senderr.ErrNotRetryable}},
		{name: "UNIMPLEMENTED", err: status.Error(codes.Unimplemented, "?"), attempts: 1, want: decision{act: actFail, kind: senderr.ErrNotRetryable}},
		{name: "ALREADY_EXISTS", err: status.Error(codes.AlreadyExists, "?"), attempts: 1, want: decision{act: actFail, kind: senderr.ErrNotRetryable}},
		{name: "last attempt", err: err503, attempts: 3, want: decision{act: actFail, kind: senderr.ErrAttemptsExhausted}},
		{name: "last attempt throttled", err: err530, attempts: 3, want: decision{act: actFail, throttled: true, kind: senderr.ErrAttemptsExhausted}},
		{name: "caller's context ended: stop", ctx: cancelled, err: status.Error(codes.Canceled, "x"), attempts: 1, want: decision{act: actFail, kind: context.Canceled, ctxErr: context.Canceled}},
		{name: "stop beats 4xx", ctx: cancelled, err: err400, attempts: 1, want: decision{act: actFail, kind: context.Canceled, ctxErr: context.Canceled}},
		{name: "Close gave up", ctx: closed, err: err503, attempts: 1, want: decision{act: actFail, kind: senderr.ErrClosed}},
		{name: "wait ends after the deadline", ctx: soon, err: err530, attempts: 2, throttles: 1, maxAttempts: 5, want: decision{act: actFail, throttled: true, kind: senderr.ErrDeadlineTooShort}},
		{name: "wait ends before the deadline", ctx: soon, err: err530, attempts: 1, want: decision{act: actRetry, throttled: true, delay: 2 * time.Millisecond, wait: 2 * time.Millisecond, timeout: 3 * time.Second}},
		{name: "far deadline", ctx: later, err: err530, attempts: 1, want: decision{act: actRetry, throttled: true, delay: 2 * time.Millisecond, wait: 2 * time.Millisecond, timeout: 3 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := defaultConfig()
			c.Throttle, c.Rand = conn, nil
			if tt.maxAttempts > 0 {
				c.MaxAttempts = tt.maxAttempts
			}
			ctx := tt.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			x := &send.Executor{Cfg: &c, Transactional: tt.transactional}
			x.SetCounts(tt.attempts, tt.throttles)
			got := decisionOf(x.Decide(ctx, wirev1.Classify(tt.err), tt.unsent, t0, t0.Add(tt.elapsed)))
			if got != tt.want {
				t.Errorf("decide(%v) = %+v; want %+v", tt.err, got, tt.want)
			}
		})
	}
}

// decision is a send.Decision with why the send ended read as this
// package's error (End.Err, as the executor's *SendError reads it), so
// that the table says ErrNotRetryable.
type decision struct {
	act       send.Act
	throttled bool
	delay     time.Duration
	wait      time.Duration
	timeout   time.Duration
	failover  bool
	kind      error
	ctxErr    error
}

const (
	actDone  = send.Done
	actRetry = send.Retry
	actFail  = send.Fail
)

func decisionOf(d send.Decision) decision {
	return decision{act: d.Act, throttled: d.Throttled, delay: d.Delay, wait: d.Wait, timeout: d.Timeout, failover: d.Failover, kind: d.End.Err(d.Cause), ctxErr: d.CtxErr}
}

// TestHalfMessageRetryRule: Decide retries a half message only when it is
// known not stored.
func TestHalfMessageRetryRule(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg.Failure = msSchedule(t)
	cfg.Throttle = msSchedule(t)
	now := time.Now()
	for _, tc := range []struct {
		kind   outcome.Kind
		unsent bool
		want   send.Act
	}{
		{outcome.Throttled, false, actRetry},
		{outcome.FailedNotStored, false, actRetry},
		{outcome.FailedNotStored, true, actRetry},
		{outcome.FailedUnknown, true, actRetry},
		{outcome.FailedUnknown, false, actFail},
		{outcome.Permanent, false, actFail},
	} {
		x := send.Executor{Cfg: &cfg, Transactional: true, Half: true}
		x.SetCounts(1, 0)
		d := x.Decide(context.Background(), outcome.Outcome{Kind: tc.kind}, tc.unsent, now, now)
		assert.Equal(t, tc.want, d.Act, "%v, unsent %v", tc.kind, tc.unsent)
		v1 := send.Executor{Cfg: &cfg, Transactional: true}
		v1.SetCounts(1, 0)
		if tc.kind == outcome.FailedNotStored && !tc.unsent {
			assert.Equal(t, actFail, v1.Decide(context.Background(), outcome.Outcome{Kind: tc.kind}, tc.unsent, now, now).Act,
				"rocketry.v1's rule is unchanged: no retry once the request left")
		}
	}
}
