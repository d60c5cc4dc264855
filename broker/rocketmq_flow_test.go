package broker_test

import (
	"net"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
)

// TestRocketMQSendQueueBusy: with one worker busy for 300 ms and 20 ms of
// waiting allowed, of two concurrent requests one is stored and the other
// refused with the broker's [TIMEOUT_CLEAN_QUEUE] answer: 42900 in
// cluster mode, 50001 in local mode, no entry, nothing stored.
func TestRocketMQSendQueueBusy(t *testing.T) {
	busyText := regexp.MustCompile(`^\[TIMEOUT_CLEAN_QUEUE\]broker busy, start flow control for a while, period in queue: \d+ms, size of queue: 0$`)
	for mode, want := range map[broker.ProxyMode]rocketmqv2.Code{broker.ProxyCluster: v2TooMany, broker.ProxyLocal: v2Intern} {
		t.Run(mode.String(), func(t *testing.T) {
			var (
				mu      sync.Mutex
				reasons []string
			)
			b := brokertest.Start(t, broker.WithProxyMode(mode),
				broker.WithSendQueue(broker.SendQueue{Workers: 1, ServiceTime: 300 * time.Millisecond, MaxWait: 20 * time.Millisecond}),
				broker.WithSendObserver(func(r broker.SendRecord) {
					mu.Lock()
					defer mu.Unlock()
					reasons = append(reasons, r.Result+" "+r.Reason)
				}))
			c := dialV2(t, b.Addr())
			resps := make([]*rocketmqv2.SendMessageResponse, 2)
			var wg sync.WaitGroup
			for i, id := range []string{"a", "b"} {
				wg.Go(func() { resps[i] = v2send(t, c, v2msg("t", id)) })
			}
			wg.Wait()
			var ok, busy []*rocketmqv2.SendMessageResponse
			for _, r := range resps {
				if r.Status.GetCode() == v2OK {
					ok = append(ok, r)
				} else {
					busy = append(busy, r)
				}
			}
			require.Len(t, ok, 1, "stored: %v", resps)
			require.Len(t, busy, 1, "refused: %v", resps)
			assert.Equal(t, want, busy[0].Status.GetCode())
			assert.Regexp(t, busyText, busy[0].Status.GetMessage())
			assert.Len(t, b.Messages("t"), 1)
			s := b.Stats()
			assert.Equal(t, int64(1), s.Throttled[broker.ReasonTimeoutCleanQueue])
			assert.Equal(t, int64(0), s.Throttled[broker.ReasonOverload])
			mu.Lock()
			defer mu.Unlock()
			assert.ElementsMatch(t, []string{"stored ", "throttled TIMEOUT_CLEAN_QUEUE"}, reasons)
		})
	}
}

// TestRocketMQSendQueueRefusesOnlyV2: rocketry.v1 sends do not queue.
func TestRocketMQSendQueueRefusesOnlyV2(t *testing.T) {
	b, c1 := start(t, broker.WithSendQueue(broker.SendQueue{Workers: 1, ServiceTime: time.Hour}))
	mustSend(t, c1, msg("t", "a"))
	_, ok := b.Stats().Throttled[broker.ReasonTimeoutCleanQueue]
	assert.True(t, ok, "the send queue's counts are in Stats when it is on")
	plain := brokertest.Start(t)
	_, ok = plain.Stats().Throttled[broker.ReasonTimeoutCleanQueue]
	assert.False(t, ok, "and only then")
}

func TestWithSendQueueValidates(t *testing.T) {
	for _, q := range []broker.SendQueue{{Workers: -1}, {Workers: 1, ServiceTime: -1}, {Workers: 1, Capacity: -1}, {Workers: 1, MaxWait: -1}} {
		_, err := broker.New(broker.WithSendQueue(q))
		assert.ErrorContains(t, err, "WithSendQueue", "%+v", q)
	}
	_, err := broker.New(broker.WithProxyMode(broker.ProxyMode(7)))
	assert.ErrorContains(t, err, "WithProxyMode(ProxyMode(7))")
}

// TestRocketMQRouteAccessPoints: alone, the broker answers as a proxy in
// cluster mode, giving itself the access points the client used, every one
// of them; with peers, as proxies in local mode, itself at its own address
// and each peer at its own addresses, whatever the client dialled.
func TestRocketMQRouteAccessPoints(t *testing.T) {
	access := &rocketmqv2.Endpoints{Scheme: rocketmqv2.AddressScheme_DOMAIN_NAME, Addresses: []*rocketmqv2.Address{
		{Host: "proxy-a.example", Port: 8081}, {Host: "proxy-b.example", Port: 8081}}}

	alone := brokertest.Start(t, broker.WithQueues(1))
	c := dialV2(t, alone.Addr())
	resp, err := c.QueryRoute(ctx(t), &rocketmqv2.QueryRouteRequest{Topic: &rocketmqv2.Resource{Name: "t"}, Endpoints: access})
	require.NoError(t, err)
	require.Len(t, resp.MessageQueues, 1)
	own := resp.MessageQueues[0].Broker
	assert.Equal(t, "broker-0", own.Name)
	assert.Equal(t, rocketmqv2.AddressScheme_DOMAIN_NAME, own.Endpoints.Scheme)
	assert.Equal(t, []string{"proxy-a.example:8081", "proxy-b.example:8081"}, addrs(own.Endpoints))
	bare := route(t, c, "t") // no endpoints in the request: the broker's own address
	assert.Equal(t, []string{alone.Addr()}, addrs(bare.MessageQueues[0].Broker.Endpoints))

	b := brokertest.Start(t, broker.WithQueues(1), broker.WithRoutePeers(func() []broker.Peer {
		return []broker.Peer{{Name: "broker-1", Addr: "127.0.0.1:7001", Addrs: []string{"127.0.0.2:7001"}}}
	}))
	resp, err = dialV2(t, b.Addr()).QueryRoute(ctx(t), &rocketmqv2.QueryRouteRequest{Topic: &rocketmqv2.Resource{Name: "t"}, Endpoints: access})
	require.NoError(t, err)
	require.Len(t, resp.MessageQueues, 2)
	own, peer := resp.MessageQueues[0].Broker, resp.MessageQueues[1].Broker
	assert.Equal(t, "broker-0", own.Name)
	assert.Equal(t, []string{b.Addr()}, addrs(own.Endpoints), "local mode: the broker at its own address")
	assert.Equal(t, "broker-1", peer.Name)
	assert.Equal(t, []string{"127.0.0.1:7001", "127.0.0.2:7001"}, addrs(peer.Endpoints))
}

func addrs(e *rocketmqv2.Endpoints) []string {
	var out []string
	for _, a := range e.GetAddresses() {
		out = append(out, net.JoinHostPort(a.Host, strconv.Itoa(int(a.Port))))
	}
	return out
}
