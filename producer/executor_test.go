package producer

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/brokercode"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/producer/internal/send"
	"github.com/rocketry-go/rocketry/senderr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestDecide pins the retry-decision table (docs/retries.md's, in
// producer/internal/send's Decide), from real wire answers as the
// classifiers read them. The executor's other tests are its package's.
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
	closeIt(ErrClosed)
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
		{name: "transactional timeout is never retried", err: status.Error(codes.DeadlineExceeded, "attempt"), transactional: true, attempts: 1, want: decision{act: actFail, kind: ErrNotRetryable}},
		{name: "transactional 500 is never retried", err: err500, transactional: true, attempts: 1, want: decision{act: actFail, kind: ErrNotRetryable}},
		{name: "400 is never retried", err: err400, attempts: 1, want: decision{act: actFail, kind: ErrNotRetryable}},
		{name: "NOT_FOUND", err: status.Error(codes.NotFound, "?"), attempts: 1, want: decision{act: actFail, kind: ErrNotRetryable}},
		{name: "PERMISSION_DENIED", err: status.Error(codes.PermissionDenied, "?"), attempts: 1, want: decision{act: actFail, kind: ErrNotRetryable}},
		{name: "UNAUTHENTICATED", err: status.Error(codes.Unauthenticated, "?"), attempts: 1, want: decision{act: actFail, kind: ErrNotRetryable}},
		{name: "FAILED_PRECONDITION", err: status.Error(codes.FailedPrecondition, "?"), attempts: 1, want: decision{act: actFail, kind: ErrNotRetryable}},
		{name: "OUT_OF_RANGE", err: status.Error(codes.OutOfRange, "?"), attempts: 1, want: decision{act: actFail, kind: ErrNotRetryable}},
		{name: "UNIMPLEMENTED", err: status.Error(codes.Unimplemented, "?"), attempts: 1, want: decision{act: actFail, kind: ErrNotRetryable}},
		{name: "ALREADY_EXISTS", err: status.Error(codes.AlreadyExists, "?"), attempts: 1, want: decision{act: actFail, kind: ErrNotRetryable}},
		{name: "last attempt", err: err503, attempts: 3, want: decision{act: actFail, kind: ErrAttemptsExhausted}},
		{name: "last attempt throttled", err: err530, attempts: 3, want: decision{act: actFail, throttled: true, kind: ErrAttemptsExhausted}},
		{name: "caller's context ended: stop", ctx: cancelled, err: status.Error(codes.Canceled, "x"), attempts: 1, want: decision{act: actFail, kind: context.Canceled, ctxErr: context.Canceled}},
		{name: "stop beats 4xx", ctx: cancelled, err: err400, attempts: 1, want: decision{act: actFail, kind: context.Canceled, ctxErr: context.Canceled}},
		{name: "Close gave up", ctx: closed, err: err503, attempts: 1, want: decision{act: actFail, kind: ErrClosed}},
		{name: "wait ends after the deadline", ctx: soon, err: err530, attempts: 2, throttles: 1, maxAttempts: 5, want: decision{act: actFail, throttled: true, kind: ErrDeadlineTooShort}},
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
			x := &send.Executor{Cfg: &c.Config, Transactional: tt.transactional}
			x.SetCounts(tt.attempts, tt.throttles)
			got := decisionOf(x.Decide(ctx, classifyError(tt.err), tt.unsent, t0, t0.Add(tt.elapsed)))
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

func TestSendErrorIs(t *testing.T) {
	t.Parallel()
	se := senderr.NewSendError(ErrAttemptsExhausted, nil)
	se.MessageID, se.Attempts, se.Code, se.Cause = "m1", 3, brokercode.Unavailable, err503
	for _, target := range []error{ErrAttemptsExhausted, err503} {
		if !errors.Is(se, target) {
			t.Errorf("errors.Is(%v, %v) = false; want true", se, target)
		}
	}
	if errors.Is(se, ErrDeadlineTooShort) {
		t.Errorf("errors.Is(%v, ErrDeadlineTooShort) = true; want false", se)
	}
	if got, want := se.Error(), `producer: send of message "m1" failed after 3 attempts (attempts exhausted): rpc error: code = Unavailable desc = test: CODE_UNAVAILABLE`; got != want {
		t.Errorf("Error() = %q; want %q", got, want)
	}
	if status.Code(se) != codes.Unavailable {
		t.Errorf("status.Code(SendError) = %v; want Unavailable", status.Code(se))
	}
	if !IsThrottled(err530) || IsThrottled(err503) || !IsThrottled(&SendError{Code: brokercode.TooManyRequests}) {
		t.Errorf("IsThrottled is wrong")
	}
	if got := CodeOf(err400); got != brokercode.BadRequest {
		t.Errorf("CodeOf(400) = %v; want CODE_BAD_REQUEST", got)
	}
}
