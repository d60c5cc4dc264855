package producer

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"google.golang.org/grpc/codes"
)

// TestSendRetrySequences runs scripted broker answers through Send and
// checks the attempts, the events and the delays chosen.
func TestSendRetrySequences(t *testing.T) {
	// Not parallel: its 20 and 50 ms deadlines must let an attempt reach
	// the stub, which a loaded machine does not promise.
	hinted := brokerErr(codes.ResourceExhausted, rocketryv1.Code_CODE_TOO_MANY_REQUESTS, rocketryv1.ThrottleReason_THROTTLE_REASON_STORAGE_LOAD, 40*time.Millisecond)
	tests := []struct {
		name          string
		script        []error
		transactional bool
		opts          []Option
		timeout       time.Duration // caller's deadline; 0: none
		wantAttempts  int
		wantKind      error // nil: stored
		wantEvents    string
		wantDelays    []time.Duration // of the retries, exact unless hinted
	}{
		{name: "stored at once", wantAttempts: 1, wantEvents: "attempt success"},
		{name: "throttled twice walks the connection backoff", script: []error{err530, err530}, wantAttempts: 3,
			wantEvents: "attempt throttle retry attempt throttle retry attempt success", wantDelays: []time.Duration{2 * time.Millisecond, 4 * time.Millisecond}},
		{name: "failure retried at once", script: []error{err503, err500}, wantAttempts: 3,
			wantEvents: "attempt retry attempt retry attempt success", wantDelays: []time.Duration{0, 0}},
		{name: "4xx not retried", script: []error{err400}, wantAttempts: 1, wantKind: ErrNotRetryable,
			wantEvents: "attempt exhausted"},
		{name: "attempts counted with the first", script: []error{err503, err503, err503, err503}, opts: []Option{WithMaxAttempts(2)},
			wantAttempts: 2, wantKind: ErrAttemptsExhausted, wantEvents: "attempt retry attempt exhausted", wantDelays: []time.Duration{0}},
		{name: "MaxAttempts 1 never retries", script: []error{err530}, opts: []Option{WithMaxAttempts(1)},
			wantAttempts: 1, wantKind: ErrAttemptsExhausted, wantEvents: "attempt throttle exhausted"},
		{name: "transactional not retried after INTERNAL", script: []error{err500}, transactional: true,
			wantAttempts: 1, wantKind: ErrNotRetryable, wantEvents: "attempt exhausted"},
		{name: "transactional not retried after its attempt's timeout", script: []error{errBlackhole}, transactional: true, opts: []Option{WithAttemptTimeout(20 * time.Millisecond)},
			wantAttempts: 1, wantKind: ErrNotRetryable, wantEvents: "attempt exhausted"},
		{name: "transactional retried after 530", script: []error{err530}, transactional: true,
			wantAttempts: 2, wantEvents: "attempt throttle retry attempt success", wantDelays: []time.Duration{2 * time.Millisecond}},
		{name: "attempt timeout is a failure", script: []error{errBlackhole, errBlackhole}, opts: []Option{WithAttemptTimeout(300 * time.Millisecond)},
			wantAttempts: 3, wantEvents: "attempt retry attempt retry attempt success", wantDelays: []time.Duration{0, 0}},
		{name: "deadline too short for the wait", script: []error{err530}, opts: []Option{WithThrottleSchedule(backoff.Constant(time.Hour))}, timeout: 2 * time.Second,
			wantAttempts: 1, wantKind: ErrDeadlineTooShort, wantEvents: "attempt throttle exhausted"},
		{name: "caller's deadline ends the send", script: []error{errBlackhole}, timeout: 50 * time.Millisecond,
			wantAttempts: 1, wantKind: context.DeadlineExceeded, wantEvents: "attempt exhausted"},
		{name: "RetryInfo lengthens the wait", script: []error{hinted}, wantAttempts: 2,
			wantEvents: "attempt throttle retry attempt success", wantDelays: []time.Duration{-40 * time.Millisecond}},
		{name: "retry budget", script: []error{err503, err503}, opts: []Option{WithRetryBudget(2, 0.1)},
			wantAttempts: 1, wantKind: ErrRetryBudget, wantEvents: "attempt exhausted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &stub{script: tt.script}
			addr := startStub(t, s)
			rec := &recorder{}
			var fellBack atomic.Int32
			opts := append([]Option{WithThrottleSchedule(msSchedule(t)), WithRand(nil), WithObserver(rec.observe),
				WithFallback(func(*Message, error) { fellBack.Add(1) })}, tt.opts...)
			p := newTestProducer(t, addr, opts...)
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			m := msg("t")
			m.Transactional = tt.transactional
			r, err := p.Send(ctx, m)
			switch {
			case tt.wantKind == nil && err != nil:
				t.Fatalf("Send() = %v; want stored", err)
			case tt.wantKind == nil:
				if r.Attempts != tt.wantAttempts || r.MessageID != m.ID {
					t.Errorf("Send() receipt = %+v; want %d attempts, ID %q", r, tt.wantAttempts, m.ID)
				}
				if got := fellBack.Load(); got != 0 {
					t.Errorf("fallback calls = %d; want 0", got)
				}
			default:
				var se *SendError
				if !errors.As(err, &se) {
					t.Fatalf("Send() = %v; want a *SendError", err)
				}
				if !errors.Is(err, tt.wantKind) || se.Attempts != tt.wantAttempts || !se.DeadLettered {
					t.Errorf("Send() = %v (attempts %d, spooled %v); want %v after %d attempts, spooled", err, se.Attempts, se.DeadLettered, tt.wantKind, tt.wantAttempts)
				}
				if len(tt.script) > 0 && tt.script[0] != errBlackhole && !errors.Is(err, tt.script[se.Attempts-1]) {
					t.Errorf("errors.Is(%v, last cause %v) = false; want true", err, tt.script[se.Attempts-1])
				}
				if got := fellBack.Load(); got != 1 {
					t.Errorf("fallback calls = %d; want 1", got)
				}
			}
			if got := s.count(); got != tt.wantAttempts {
				t.Errorf("broker saw %d calls; want %d", got, tt.wantAttempts)
			}
			wantEvents := tt.wantEvents
			if tt.wantKind != nil {
				wantEvents += " dead-letter"
			}
			if got := rec.kinds(""); got != wantEvents {
				t.Errorf("events = %q; want %q", got, wantEvents)
			}
			retries := rec.retries()
			if len(retries) != len(tt.wantDelays) {
				t.Fatalf("retries = %d; want %d", len(retries), len(tt.wantDelays))
			}
			for i, e := range retries {
				want := tt.wantDelays[i]
				if want < 0 { // a hint: at least that long
					if e.Delay < -want {
						t.Errorf("retry %d Delay = %v; want >= %v", i+1, e.Delay, -want)
					}
					continue
				}
				if e.Delay != want {
					t.Errorf("retry %d Delay = %v; want %v", i+1, e.Delay, want)
				}
				if e.MessageID != m.ID || e.Attempt != i+1 {
					t.Errorf("retry event = %+v; want message %q attempt %d", e, m.ID, i+1)
				}
			}
		})
	}
}

// TestSendKeepsTheID: every attempt of a send carries the same ID.
func TestSendKeepsTheID(t *testing.T) {
	t.Parallel()
	s := &stub{script: []error{err503, err530}}
	addr := startStub(t, s)
	rec := &recorder{}
	p := newTestProducer(t, addr, WithThrottleSchedule(msSchedule(t)), WithObserver(rec.observe))
	m := msg("t")
	if _, err := p.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	for _, e := range rec.events() {
		if e.MessageID != m.ID {
			t.Errorf("event %v has ID %q; want %q", e.Kind, e.MessageID, m.ID)
		}
	}
	if len(s.ids) != 1 || s.ids[0] != m.ID {
		t.Errorf("stored IDs = %v; want [%s]", s.ids, m.ID)
	}
}

// TestSendInvalidMessage: an invalid message makes no attempt and is not
// handed to the fallback.
func TestSendInvalidMessage(t *testing.T) {
	t.Parallel()
	s := &stub{}
	addr := startStub(t, s)
	var fellBack atomic.Int32
	p := newTestProducer(t, addr, WithMaxBodyBytes(4), WithFallback(func(*Message, error) { fellBack.Add(1) }))
	for _, m := range []*Message{nil, {Body: []byte("x")}, {Topic: "t", Body: []byte("12345")}} {
		if _, err := p.Send(context.Background(), m); !errors.Is(err, ErrInvalidMessage) {
			t.Errorf("Send(%+v) = %v; want ErrInvalidMessage", m, err)
		}
		if err := p.SendAsync(context.Background(), m, func(*SendReceipt, error) { t.Error("callback ran") }); !errors.Is(err, ErrInvalidMessage) {
			t.Errorf("SendAsync(%+v) = %v; want ErrInvalidMessage", m, err)
		}
	}
	if s.count() != 0 || fellBack.Load() != 0 {
		t.Errorf("calls = %d, fallbacks = %d; want 0, 0", s.count(), fellBack.Load())
	}
}
