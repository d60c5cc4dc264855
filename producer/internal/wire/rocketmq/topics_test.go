package wirermq

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/rocketry-go/rocketry/message"
	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq/rmqtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeNow is a client clock that a test moves.
type fakeNow struct{ ns atomic.Int64 }

func newFakeNow() *fakeNow {
	f := &fakeNow{}
	f.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return f
}
func (f *fakeNow) now() time.Time      { return time.Unix(0, f.ns.Load()) }
func (f *fakeNow) add(d time.Duration) { f.ns.Add(int64(d)) }
func sendTo(t *testing.T, c *rmqClient, topic string) {
	t.Helper()
	o, _ := c.newCall(&message.Message{ID: c.ids.next(), Topic: topic, Body: []byte("x")}).attempt(context.Background(), 0, true, time.Time{})
	require.Equal(t, outcome.Stored, o.Kind, "%s: %v", topic, o.Err)
}

// TestRmqNewTopicsCoalesceSettings: new topics do not each write the
// client's Settings (of every topic) to the streams. With a long gap, 300
// new topics make at most one write after the stream's first, and no send
// waits for it; with a short one, the server is told of all 300 in the
// end.
func TestRmqNewTopicsCoalesceSettings(t *testing.T) {
	const n = 300
	srv := rmqtest.Start(t)
	srv.SetSettings(rmqtest.Settings(0))
	for i := range n {
		tp := fmt.Sprintf("tenant-%d", i)
		srv.SetRoute(tp, rmqtest.QueueOn(t, srv, tp, "broker-a", 0))
	}
	c := newTestRMQClient(t, []string{srv.Addr})
	c.settingsEvery = time.Hour
	require.NoError(t, c.start(context.Background()))
	for i := range n {
		sendTo(t, c, fmt.Sprintf("tenant-%d", i))
	}
	assert.LessOrEqual(t, c.settingsWrites.Load(), int64(1), "one write at once, the rest coalesced into the next")
	assert.LessOrEqual(t, len(srv.ClientSettings()), 2)
	assert.Len(t, c.settingsCommand().GetSettings().GetPublishing().GetTopics(), n)

	srv2 := rmqtest.Start(t)
	srv2.SetSettings(rmqtest.Settings(0))
	for i := range n {
		tp := fmt.Sprintf("tenant-%d", i)
		srv2.SetRoute(tp, rmqtest.QueueOn(t, srv2, tp, "broker-a", 0))
	}
	c2 := newTestRMQClient(t, []string{srv2.Addr})
	c2.settingsEvery = 20 * time.Millisecond
	require.NoError(t, c2.start(context.Background()))
	for i := range n {
		sendTo(t, c2, fmt.Sprintf("tenant-%d", i))
	}
	require.Eventually(t, func() bool {
		sts := srv2.ClientSettings()
		return len(sts[len(sts)-1].GetPublishing().GetTopics()) == n
	}, 5*time.Second, time.Millisecond)
}

// TestRmqIdleTopicsDropped: a topic unsent for topicIdle loses its route,
// its pacer and its place in Settings at the next refresh; a topic sent
// to meanwhile keeps them; a later send to the dropped one reads its
// route again.
func TestRmqIdleTopicsDropped(t *testing.T) {
	b := brokertest.Start(t, broker.WithBrokerName("broker-a"), broker.WithQueues(1))
	clk := newFakeNow()
	c := newTestRMQClient(t, []string{b.Addr()})
	c.now = clk.now
	c.routeEvery = time.Hour // refreshRoutes is called below
	c.topicIdle = 15 * time.Minute
	require.NoError(t, c.start(context.Background()))

	sendTo(t, c, "busy")
	sendTo(t, c, "idle")
	idlePacer := c.brokerPacer("broker-a").Of("idle").Topic
	busyPacer := c.brokerPacer("broker-a").Of("busy").Topic
	clk.add(10 * time.Minute)
	sendTo(t, c, "busy")
	clk.add(6 * time.Minute) // idle: 16 minutes; busy: 6
	c.refreshRoutes()

	c.mu.Lock()
	_, busy := c.routes["busy"]
	_, idle := c.routes["idle"]
	c.mu.Unlock()
	assert.True(t, busy)
	assert.False(t, idle, "the idle topic's route is dropped")
	assert.Same(t, busyPacer, c.brokerPacer("broker-a").Of("busy").Topic, "the busy topic keeps its pacer")
	assert.NotSame(t, idlePacer, c.brokerPacer("broker-a").Of("idle").Topic, "the idle topic's pacer is dropped")
	var names []string
	for _, r := range c.settingsCommand().GetSettings().GetPublishing().GetTopics() {
		names = append(names, r.GetName())
	}
	assert.Equal(t, []string{"busy"}, names)

	// A later send reads the route again, transparently.
	sendTo(t, c, "idle")
	c.mu.Lock()
	assert.Len(t, c.routes, 2)
	c.mu.Unlock()
}

// TestRmqRefreshKeepsUse: a refresh replaces every kept topic's route,
// a few queries at a time, and the new route carries the old one's last
// use, so that refreshes do not keep an idle topic alive.
func TestRmqRefreshKeepsUse(t *testing.T) {
	b := brokertest.Start(t, broker.WithQueues(1))
	clk := newFakeNow()
	c := newTestRMQClient(t, []string{b.Addr()})
	c.now = clk.now
	c.routeEvery = time.Hour
	c.refreshWorkers = 3
	require.NoError(t, c.start(context.Background()))
	for i := range 20 {
		sendTo(t, c, fmt.Sprintf("t%d", i))
	}
	c.mu.Lock()
	before := map[string]*rmqRoute{}
	for k, r := range c.routes {
		before[k] = r
	}
	c.mu.Unlock()
	clk.add(10 * time.Minute)
	c.refreshRoutes()
	c.mu.Lock()
	for k, r := range c.routes {
		assert.NotSame(t, before[k], r, k)
		assert.Same(t, before[k].used, r.used, k)
	}
	assert.Len(t, c.routes, 20)
	c.mu.Unlock()
	clk.add(10 * time.Minute) // 20 minutes unsent, refreshed or not
	c.refreshRoutes()
	c.mu.Lock()
	assert.Empty(t, c.routes)
	c.mu.Unlock()
}
