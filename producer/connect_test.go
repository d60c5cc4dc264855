package producer

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/producer/internal/send"
	"github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq/rmqtest"
)

// The regression tests of issue 14's item 2: an unreachable broker read as
// a timeout. The first attempt failed fast, but each retry waited for the
// connection (gRPC wait-for-ready) until its attempt timeout, so a send to
// a closed port, an unknown host or an HTTP server took 6 s and ended with
// "attempt timeout exceeded".

// unknownHost is a host name that does not resolve: a .invalid name
// (RFC 6761), or where the machine's DNS does not answer for it, a .onion
// name, which Go refuses without asking DNS (RFC 7686).
func unknownHost(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := net.DefaultResolver.LookupHost(ctx, "rocketry-test.invalid")
	var de *net.DNSError
	if assert.Error(t, err, "rocketry-test.invalid resolved") && errors.As(err, &de) && de.IsNotFound {
		return "rocketry-test.invalid"
	}
	t.Logf("the DNS here does not answer NXDOMAIN for .invalid (%v): using .onion", err)
	return "rocketry-test.onion"
}

// TestUnreachableBrokerIsNamed: a closed port, an unknown host and an
// HTTP/1 server each fail every attempt at once, known not stored, with an
// error that names the cause; the attempts are spent without any attempt
// timeout.
func TestUnreachableBrokerIsNamed(t *testing.T) {
	t.Parallel()
	web := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(web.Close)
	tests := []struct {
		name   string
		addr   string
		reason error
		says   string
	}{
		{"closed port", rmqtest.ClosedAddr(t), ErrConnectionRefused, "unreachable: connection refused"},
		{"unknown host", unknownHost(t) + ":7777", ErrUnknownHost, "unreachable: unknown host"},
		{"HTTP/1 server", web.Listener.Addr().String(), ErrNotGRPC, "unreachable: not a gRPC server"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			// The attempt timeout is the default (3 s): a send that waited
			// for the connection would end with it instead.
			p := newTestProducer(t, tt.addr, WithMaxAttempts(3), WithObserver(rec.observe))
			check := func(how string, err error) {
				t.Helper()
				var se *SendError
				require.ErrorAs(t, err, &se, "%s = %v; want a *SendError", how, err)
				assert.ErrorIs(t, err, tt.reason, "%s", how)
				assert.ErrorIs(t, err, ErrAttemptsExhausted, "%s", how)
				var ce *ConnectError
				require.ErrorAs(t, err, &ce, "%s", how)
				assert.Equal(t, tt.addr, ce.Endpoint, "%s: ConnectError.Endpoint", how)
				assert.Equal(t, 3, se.Attempts, "%s: attempts", how)
				assert.Equal(t, FailedNotStored, se.Last, "%s: last outcome", how)
				assert.Equal(t, codes.Unavailable, status.Code(se.Cause), "%s: the cause's code", how)
				assert.NotErrorIs(t, err, send.ErrAttemptTimeout, "%s", how)
				assert.Contains(t, err.Error(), tt.says, "%s", how)
				assert.NotContains(t, err.Error(), "attempt timeout", "%s", how)
			}
			_, err := p.Send(context.Background(), msg("t"))
			check("Send", err)

			done := make(chan error, 1)
			require.NoError(t, p.SendAsync(context.Background(), msg("t"), func(_ *SendReceipt, err error) { done <- err }))
			check("SendAsync's callback", <-done)

			retries := rec.retries()
			require.Len(t, retries, 4, "retries of the two sends")
			for _, e := range retries {
				assert.Equal(t, FailedNotStored, e.Why, "retry %+v", e)
				assert.Zero(t, e.Delay, "retry %+v", e)
			}
		})
	}
}

// TestWaitForReadyWaitsForTheBroker: with WithWaitForReady, the retry to a
// broker that could not be reached waits for it within its attempt
// timeout, and is stored once the broker listens.
func TestWaitForReadyWaitsForTheBroker(t *testing.T) {
	t.Parallel()
	addr := rmqtest.ClosedAddr(t)
	b, err := broker.New()
	require.NoError(t, err)
	t.Cleanup(b.Stop)
	started := make(chan error, 1)
	var once sync.Once
	obs := func(e Event) {
		if e.Kind == EventRetry {
			once.Do(func() { started <- b.Start(addr) }) // the broker comes up before the retry
		}
	}
	fast := grpc.WithConnectParams(grpc.ConnectParams{Backoff: grpcbackoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1.6, MaxDelay: 20 * time.Millisecond}})
	p := newTestProducer(t, addr, WithWaitForReady(true), WithMaxAttempts(2), WithAttemptTimeout(10*time.Second),
		WithDialOptions(fast), WithObserver(obs))
	r, err := p.Send(context.Background(), msg("t"))
	require.NoError(t, <-started)
	require.NoError(t, err)
	assert.Equal(t, 2, r.Attempts)
	assert.Len(t, b.Messages("t"), 1)
}

// TestRocketMQUnreachableProxyIsNamed: New over RocketMQ 5 waits for the
// proxy's Settings; when no access point can be reached it fails at once,
// naming why, instead of waiting out the attempt timeout.
func TestRocketMQUnreachableProxyIsNamed(t *testing.T) {
	t.Parallel()
	addr := rmqtest.ClosedAddr(t)
	p, err := New(addr, WithProtocol(RocketMQ5))
	if p != nil {
		_ = p.Close(context.Background())
	}
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrConnectionRefused)
	var ce *ConnectError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, addr, ce.Endpoint)
	assert.NotContains(t, err.Error(), "no Settings", "New waited out its timeout")
}

// TestWaitsForABrokerReachedLately: by default a broker that a request
// reached lately is waited for when it goes away (a restart): the retry
// waits for its connection, and is stored when it comes back, or ends with
// the attempt timeout when it does not. A broker not reached for longer
// than send.ReachWindow is not waited for: its attempts fail at once, naming
// the cause.
func TestWaitsForABrokerReachedLately(t *testing.T) {
	addr := rmqtest.ClosedAddr(t)
	start := func() *broker.Broker {
		b, err := broker.New()
		require.NoError(t, err)
		require.NoError(t, b.Start(addr))
		t.Cleanup(b.Stop)
		return b
	}
	b1 := start()
	var comeBack atomic.Bool
	restarted := make(chan *broker.Broker, 1)
	obs := func(e Event) {
		if e.Kind == EventRetry && comeBack.CompareAndSwap(true, false) {
			restarted <- start() // the broker is back before the retry
		}
	}
	fast := grpc.WithConnectParams(grpc.ConnectParams{Backoff: grpcbackoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1.6, MaxDelay: 20 * time.Millisecond}})
	p := newTestProducer(t, addr, WithMaxAttempts(2), WithAttemptTimeout(300*time.Millisecond), WithDialOptions(fast), WithObserver(obs))
	ctx := context.Background()
	_, err := p.Send(ctx, msg("t"))
	require.NoError(t, err)

	b1.Stop()
	comeBack.Store(true)
	r, err := p.Send(ctx, msg("t"))
	require.NoError(t, err, "the retry waits for the broker that was reached")
	assert.Equal(t, 2, r.Attempts)
	b2 := <-restarted
	assert.Len(t, b2.Messages("t"), 1)

	b2.Stop()
	_, err = p.Send(ctx, msg("t"))
	var se *SendError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, codes.DeadlineExceeded, status.Code(se.Cause), "the retry waited for the broker reached lately: %v", err)
	assert.ErrorIs(t, err, ErrConnectionRefused, "the wait's end names why")
	assert.Contains(t, err.Error(), "unreachable until the attempt's deadline: connection refused")

	// The last request to reach the broker is now older than send.ReachWindow.
	v1Of(p).FixedReach(0).SetLast(time.Now().Add(-send.ReachWindow - time.Second))
	_, err = p.Send(ctx, msg("t"))
	require.ErrorAs(t, err, &se)
	assert.ErrorIs(t, err, ErrConnectionRefused, "a broker not reached lately is not waited for")
	assert.Equal(t, 2, se.Attempts)
	assert.NotContains(t, err.Error(), "attempt timeout")
}
