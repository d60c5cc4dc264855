package chaos_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rocketry-go/rocketry/backoff"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/producer"
	"github.com/rocketry-go/rocketry/producer/deadletter"
)

// TestLoad is the sustained run: ROCKETRY_LOAD=3m sends as fast as the
// machine allows for that long (async sends up to MaxInFlight, plus sync
// senders) to a broker in another process whose backlog throttling is
// tripped every few seconds by a consumer that pauses. Per interval it
// samples the sends done, their latency (p50, p99), the live heap and the
// goroutines, and checks that the last interval is not worse than the
// first ones (generous ratios): no leak, no growing queue. At the end:
// every send answered once, every failure spooled, the broker stored each
// success once.
func TestLoad(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("ROCKETRY_LOAD"))
	if err != nil || d <= 0 {
		t.Skip("set ROCKETRY_LOAD=DURATION (e.g. 1m) for the sustained load run")
	}
	const maxBacklog = 1000
	addr, stopBroker := startBrokerProcess(t, maxBacklog)
	defer stopBroker()

	throttle, err := backoff.NewConnection(backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 100 * time.Millisecond, MinConnectTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	store, err := deadletter.Open(filepath.Join(t.TempDir(), "dead.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	const inFlight = 512
	p, err := producer.New(addr, producer.WithProtocol(producer.RocketryV1), producer.WithMaxInFlight(inFlight), producer.WithMaxAttempts(30),
		producer.WithThrottleSchedule(throttle), producer.WithAttemptTimeout(2*time.Second), producer.WithDeadLetterSink(store))
	if err != nil {
		t.Fatal(err)
	}

	// The consumer: drains as fast as it can, but stops for 500 ms every
	// 2 s, so the backlog goes over MaxBacklog and sends are throttled.
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cctx, stopConsumer := context.WithCancel(context.Background())
	var consumer sync.WaitGroup
	consumer.Go(func() {
		c := rocketryv1.NewConsumerServiceClient(cc)
		last := time.Now()
		for cctx.Err() == nil {
			if time.Since(last) > 2*time.Second {
				last = time.Now()
				select {
				case <-cctx.Done():
				case <-time.After(500 * time.Millisecond):
				}
				continue
			}
			r, err := c.ReceiveMessages(cctx, &rocketryv1.ReceiveMessagesRequest{Topic: "load", Group: "g", MaxMessages: 2000, AutoCommit: true})
			if err != nil || len(r.GetMessages()) < 100 {
				select { // a consumer's poll interval while the log is short
				case <-cctx.Done():
				case <-time.After(2 * time.Millisecond):
				}
			}
		}
	})

	type sample struct {
		sends          int64
		p50, p99       time.Duration
		heapMiB        float64
		goroutines     int
		throttledSends int64
	}
	var (
		mu        sync.Mutex
		latencies []time.Duration
		sent      atomic.Int64
		answered  atomic.Int64
		ok, dups  atomic.Int64
		failed    atomic.Int64
		throttled atomic.Int64
		notBack   atomic.Int64
	)
	done := func(start time.Time, r *producer.SendReceipt, err error) {
		lat := time.Since(start)
		answered.Add(1)
		if err == nil {
			ok.Add(1)
			if r.Duplicate {
				dups.Add(1)
			}
			if r.Attempts > 1 {
				throttled.Add(1)
			}
		} else {
			failed.Add(1)
			var se *producer.SendError
			if !errors.As(err, &se) || !se.DeadLettered {
				notBack.Add(1)
			}
		}
		mu.Lock()
		latencies = append(latencies, lat)
		mu.Unlock()
	}

	end := time.Now().Add(d)
	var senders sync.WaitGroup
	body := []byte(strings.Repeat("x", 64))
	senders.Go(func() {
		for time.Now().Before(end) {
			start := time.Now()
			if err := p.SendAsync(context.Background(), &producer.Message{Topic: "load", Body: body},
				func(r *producer.SendReceipt, err error) { done(start, r, err) }); err != nil {
				t.Errorf("SendAsync() = %v", err)
				return
			}
			sent.Add(1)
		}
	})
	for range 2 {
		senders.Go(func() {
			for time.Now().Before(end) {
				start := time.Now()
				sent.Add(1)
				r, err := p.Send(context.Background(), &producer.Message{Topic: "load", Body: body})
				done(start, r, err)
			}
		})
	}

	interval := max(d/12, time.Second)
	var samples []sample
	tk := time.NewTicker(interval)
	var lastAnswered, lastThrottled int64
	for time.Now().Before(end) {
		<-tk.C
		mu.Lock()
		lat := latencies
		latencies = nil
		mu.Unlock()
		slices.Sort(lat)
		s := sample{goroutines: runtime.NumGoroutine()}
		a := answered.Load()
		s.sends, lastAnswered = a-lastAnswered, a
		th := throttled.Load()
		s.throttledSends, lastThrottled = th-lastThrottled, th
		if len(lat) > 0 {
			s.p50, s.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		s.heapMiB = float64(ms.HeapAlloc) / (1 << 20)
		samples = append(samples, s)
		t.Logf("interval %2d: %6d sends (%5.0f/s), %5d retried after throttling, p50 %8v, p99 %8v, live heap %5.1f MiB, goroutines %d",
			len(samples), s.sends, float64(s.sends)/interval.Seconds(), s.throttledSends, s.p50.Round(time.Microsecond), s.p99.Round(time.Microsecond), s.heapMiB, s.goroutines)
	}
	tk.Stop()
	senders.Wait()
	closeCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	if err := p.Close(closeCtx); err != nil {
		t.Errorf("Close() = %v", err)
	}
	cancel()
	stopConsumer()
	consumer.Wait()

	st, err := rocketryv1.NewConsumerServiceClient(cc).GetStats(context.Background(), &rocketryv1.GetStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := store.Len()
	if err != nil {
		t.Errorf("Len() = %v", err)
	}
	t.Logf("TOTAL %v: sent %d, answered %d, stored %d (%d duplicates answered), failed %d (spooled %d), broker stored %d, duplicates %d, throttled %v",
		d, sent.Load(), answered.Load(), ok.Load(), dups.Load(), failed.Load(), recs, st.GetStored(), st.GetDuplicates(), st.GetThrottled())
	if sent.Load() != answered.Load() || notBack.Load() != 0 || int64(recs) != failed.Load() {
		t.Errorf("sent %d, answered %d, failures not handed back %d, spooled %d of %d failed; want every send answered and every failure spooled",
			sent.Load(), answered.Load(), notBack.Load(), recs, failed.Load())
	}
	if st.GetStored() != ok.Load()-dups.Load() {
		t.Errorf("broker stored %d; want one per success, %d", st.GetStored(), ok.Load()-dups.Load())
	}
	checkFlat(t, samples, func(s sample) float64 { return float64(s.p99) / 1e6 }, "p99 latency (ms)", 3, 50)
	checkFlat(t, samples, func(s sample) float64 { return s.heapMiB }, "live heap (MiB)", 2, 16)
	checkFlat(t, samples, func(s sample) float64 { return float64(s.goroutines) }, "goroutines", 1.5, 100)
}

// checkFlat fails t when the last sample's value is over ratio times the
// largest of the first ones (after the first, a warm-up) plus slack.
func checkFlat[S any](t *testing.T, samples []S, value func(S) float64, what string, ratio, slack float64) {
	t.Helper()
	if len(samples) < 4 {
		t.Logf("%s: too few intervals (%d) to judge", what, len(samples))
		return
	}
	ref := 0.0
	for _, s := range samples[1:min(4, len(samples)-1)] {
		ref = max(ref, value(s))
	}
	last := value(samples[len(samples)-1])
	t.Logf("%s: first intervals at most %.1f, last %.1f (limit %.1f)", what, ref, last, ref*ratio+slack)
	if last > ref*ratio+slack {
		t.Errorf("%s grew: last interval %.1f; first ones at most %.1f (limit %.1f x + %.0f)", what, last, ref, ratio, slack)
	}
}

// startBrokerProcess runs this test binary as a broker process (see
// brokerProcessEnv) and returns its address and a function that stops it.
func startBrokerProcess(t *testing.T, maxBacklog int64) (string, func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", brokerProcessEnv, maxBacklog))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("broker process: %v", err)
	}
	return strings.TrimSpace(line), func() {
		stdin.Close()
		_ = cmd.Wait()
	}
}
