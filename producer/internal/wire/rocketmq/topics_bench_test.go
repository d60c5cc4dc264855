package wirermq

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/rocketry-go/rocketry/message"
	"github.com/rocketry-go/rocketry/outcome"
)

// BenchmarkRefreshUnderSends measures what a route refresh of
// $ROCKETRY_TOPICS (default 10,000) cached topics does to sends to a
// cached topic meanwhile (BENCHMARKS.md, "Thousands of topics"): the
// median, 99th percentile and largest send time, in milliseconds, while
// sends run alone (idle_*) and while a refresh runs (refresh_*), and how
// long the refresh takes (refresh_s), with rmqRefreshWorkers queries at
// once ($ROCKETRY_REFRESH_WORKERS when set). The broker is the bundled one in
// this process on 127.0.0.1:0:
//
//	go test ./producer/internal/wire/rocketmq -run '^$' -bench RefreshUnderSends -benchtime 1x
func BenchmarkRefreshUnderSends(b *testing.B) {
	n := 10000
	if s := os.Getenv("ROCKETRY_TOPICS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("ROCKETRY_TOPICS=%q: want a count", s)
		}
		n = v
	}
	br := brokertest.Start(b, broker.WithQueues(4))
	c, err := newRMQClient([]string{br.Addr()}, testConfig())
	if err != nil {
		b.Fatal(err)
	}
	c.routeEvery = time.Hour // refreshRoutes is called below
	if s := os.Getenv("ROCKETRY_REFRESH_WORKERS"); s != "" {
		if c.refreshWorkers, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	defer c.close(context.Background())
	ctx := context.Background()
	if err := c.start(ctx); err != nil {
		b.Fatal(err)
	}
	one := func(topic string) time.Duration {
		start := time.Now()
		o, _ := c.newCall(&message.Message{ID: c.ids.next(), Topic: topic, Body: make([]byte, 100)}).attempt(ctx, 0, true, time.Time{})
		if o.Kind != outcome.Stored {
			b.Fatalf("%s: %v", topic, o.Err)
		}
		return time.Since(start)
	}
	for i := range n {
		one(fmt.Sprintf("t%d", i))
	}
	sends := func(done <-chan struct{}, max int) []time.Duration {
		var out []time.Duration
		for i := 0; ; i++ {
			select {
			case <-done:
				return out
			default:
			}
			if max > 0 && len(out) >= max {
				return out
			}
			out = append(out, one(fmt.Sprintf("t%d", i%n)))
		}
	}
	for range b.N {
		idle := sends(nil, 2000)
		done := make(chan struct{})
		var took time.Duration
		go func() {
			start := time.Now()
			c.refreshRoutes()
			took = time.Since(start)
			close(done)
		}()
		during := sends(done, 0)
		report := func(prefix string, ds []time.Duration) {
			slices.Sort(ds)
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			b.ReportMetric(ms(ds[len(ds)/2]), prefix+"_p50_ms")
			b.ReportMetric(ms(ds[len(ds)*99/100]), prefix+"_p99_ms")
			b.ReportMetric(ms(ds[len(ds)-1]), prefix+"_max_ms")
		}
		report("idle", idle)
		report("refresh", during)
		b.ReportMetric(took.Seconds(), "refresh_s")
	}
}
