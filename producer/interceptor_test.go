package producer

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// dialWith dials addr with the interceptor for the test.
func dialWith(t testing.TB, addr string, ic grpc.UnaryClientInterceptor) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(ic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func sendReq(id string, transactional bool) *rocketryv1.SendMessageRequest {
	return &rocketryv1.SendMessageRequest{Messages: []*rocketryv1.Message{{MessageId: id, Topic: "t", Body: []byte("x"), Transactional: transactional}}}
}

// TestInterceptorOnBroker: the generated client with the interceptor gets
// the Producer's retry contract from the real broker.
func TestInterceptorOnBroker(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t)
	rec := &recorder{}
	cc := dialWith(t, b.Addr(), UnaryClientInterceptor(WithObserver(rec.observe)))
	client := rocketryv1.NewMessagingServiceClient(cc)
	ctx := context.Background()

	tests := []struct {
		name         string
		faults       broker.Faults
		req          *rocketryv1.SendMessageRequest
		copts        []grpc.CallOption
		wantErr      error // nil: stored
		wantCode     codes.Code
		wantRequests int64
		wantContains string
	}{
		{name: "stored", req: sendReq("a", false), wantRequests: 1},
		{name: "UNAVAILABLE: three attempts", faults: broker.Faults{Unavailable: true}, req: sendReq("b", false),
			wantErr: ErrAttemptsExhausted, wantCode: codes.Unavailable, wantRequests: 3},
		{name: "per-call MaxAttempts", faults: broker.Faults{Unavailable: true}, req: sendReq("c", false), copts: []grpc.CallOption{WithCallOptions(WithMaxAttempts(5))},
			wantErr: ErrAttemptsExhausted, wantCode: codes.Unavailable, wantRequests: 5},
		{name: "transactional request not retried", faults: broker.Faults{InternalRate: 1}, req: sendReq("d", true),
			wantErr: ErrNotRetryable, wantCode: codes.Internal, wantRequests: 1},
		{name: "4xx not retried", req: &rocketryv1.SendMessageRequest{}, wantErr: ErrNotRetryable, wantCode: codes.InvalidArgument, wantRequests: 1},
		{name: "per-call option that does not apply", req: sendReq("e", false), copts: []grpc.CallOption{WithCallOptions(WithDeadLetterSink(newMemSink()))},
			wantContains: "producer: WithDeadLetterSink does not apply to WithCallOptions", wantRequests: 0},
		{name: "invalid per-call option", req: sendReq("f", false), copts: []grpc.CallOption{WithCallOptions(WithMaxAttempts(0))},
			wantContains: "producer: WithMaxAttempts(0): must be >= 1", wantRequests: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b.SetFaults(tt.faults)
			defer b.SetFaults(broker.Faults{})
			before := b.Stats().GetSendRequests()
			_, err := client.SendMessage(ctx, tt.req, tt.copts...)
			switch {
			case tt.wantContains != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantContains) {
					t.Errorf("SendMessage() = %v; want an error containing %q", err, tt.wantContains)
				}
			case tt.wantErr == nil && err != nil:
				t.Errorf("SendMessage() = %v; want stored", err)
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) || status.Code(err) != tt.wantCode {
					t.Errorf("SendMessage() = %v (code %v); want %v with code %v", err, status.Code(err), tt.wantErr, tt.wantCode)
				}
			}
			if got := b.Stats().GetSendRequests() - before; got != tt.wantRequests {
				t.Errorf("broker saw %d requests; want %d", got, tt.wantRequests)
			}
		})
	}
	// Any service: the consumer service's calls go through it too.
	if _, err := rocketryv1.NewConsumerServiceClient(cc).GetStats(ctx, &rocketryv1.GetStatsRequest{}); err != nil {
		t.Errorf("GetStats() through the interceptor = %v", err)
	}
	if got := rec.kinds("b"); got != "attempt retry attempt retry attempt exhausted" {
		t.Errorf("events of b = %q; want three attempts and exhausted", got)
	}
}

// TestInterceptorThrottleSchedule: the interceptor waits on the same
// schedules as the Producer, with the same numbering.
func TestInterceptorThrottleSchedule(t *testing.T) {
	t.Parallel()
	s := &stub{script: []error{err530, err530, err503, status.Error(codes.ResourceExhausted, "plain")}}
	addr := startStub(t, s)
	rec := &recorder{}
	cc := dialWith(t, addr, UnaryClientInterceptor(WithThrottleSchedule(msSchedule(t)), WithRand(nil), WithMaxAttempts(5), WithObserver(rec.observe)))
	if _, err := rocketryv1.NewMessagingServiceClient(cc).SendMessage(context.Background(), sendReq("x", false)); err != nil {
		t.Fatalf("SendMessage() = %v", err)
	}
	var got []string
	for _, e := range rec.retries() {
		got = append(got, e.Why.String()+" "+e.Delay.String())
	}
	want := "throttled 2ms,throttled 4ms,failed-not-stored 0s,throttled 8ms"
	if strings.Join(got, ",") != want {
		t.Errorf("retries = %v; want %s", got, want)
	}
	if s.count() != 5 {
		t.Errorf("calls = %d; want 5", s.count())
	}
}
