package wirermq

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/producer/internal/send"
	"github.com/stretchr/testify/require"
)

// testConfig is a client's configuration with the producer's defaults:
// 3 attempts, an attempt timeout of 3 s, immediate retries after a
// failure, pacing on, no logs.
func testConfig() Config {
	return Config{Send: &send.Config{MaxAttempts: 3, AttemptTimeout: 3 * time.Second, Failure: backoff.Immediate, Logger: slog.New(slog.DiscardHandler)}, Pacing: true}
}

// newTestRMQClient makes a client of addrs with the producer's defaults
// (changed by opts) and short intervals; it is closed at the test's end.
func newTestRMQClient(t *testing.T, addrs []string, opts ...func(*Config)) *rmqClient {
	t.Helper()
	cfg := testConfig()
	for _, o := range opts {
		o(&cfg)
	}
	c, err := newRMQClient(addrs, cfg)
	require.NoError(t, err)
	c.heartbeatEvery = 20 * time.Millisecond
	c.routeEvery = 50 * time.Millisecond
	c.settingsEvery = 5 * time.Millisecond
	c.reopenMin, c.reopenMax = 10*time.Millisecond, 40*time.Millisecond
	t.Cleanup(func() { c.close(context.Background()) })
	return c
}
