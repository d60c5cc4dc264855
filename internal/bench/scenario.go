package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rocketry-go/rocketry/broker"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/internal/xrand"
)

// Scenario is the throttling scenario: a broker whose topic accepts at most
// MaxBacklog unconsumed messages, one consumer group draining it at
// DrainRate, Senders concurrent senders offering more than that, and, at
// EpisodeAt, a storage-load episode: a group of another topic reset to
// offset 0 re-reads EpisodeReads old messages at EpisodeReadRate, above
// the broker's MaxStorageLoad, so that every send is refused for a while.
type Scenario struct {
	// Duration is how long senders start new sends.
	Duration time.Duration
	// Warmup is left out of the goodput and drain figures (the backlog
	// fills up then).
	Warmup time.Duration
	// Senders is the number of concurrent senders, each sending one
	// message at a time.
	Senders int
	// SendTimeout bounds every send, retries included.
	SendTimeout time.Duration
	// BodyBytes is the size of every body.
	BodyBytes int

	// DrainRate is the consumer's rate, messages per second: it asks for
	// messages every DrainTick and cannot save up more than DrainBurst
	// worth of time while the topic is empty (nor while it is not
	// scheduled: the burst forgives a late tick).
	DrainRate  float64
	DrainTick  time.Duration
	DrainBurst time.Duration
	// MaxBacklog is the broker's backlog limit (low water 80%).
	MaxBacklog int64

	// The storage-load episode.
	ArchiveMessages int
	EpisodeAt       time.Duration
	EpisodeReads    int
	EpisodeReadRate float64
	MaxStorageLoad  float64

	// Scale multiplies rocketry's default throttle schedule's times (the
	// gRPC connection backoff); MaxAttempts is its attempts per send.
	Scale       float64
	MaxAttempts int
	// NaiveSleep is naive-sleep's fixed wait.
	NaiveSleep time.Duration
	// Seed seeds rocketry's jitter and the broker.
	Seed uint64
	// Trace, when > 0, samples the broker's stats at that interval into
	// Result.Timeline.
	Trace time.Duration
}

// DefaultScenario returns the scenario `rocketry-bench` runs by default.
func DefaultScenario() Scenario {
	return Scenario{
		Duration:        10 * time.Second,
		Warmup:          time.Second,
		Senders:         64,
		SendTimeout:     5 * time.Second,
		BodyBytes:       100,
		DrainRate:       2000,
		DrainTick:       5 * time.Millisecond,
		DrainBurst:      25 * time.Millisecond,
		MaxBacklog:      2000,
		ArchiveMessages: 20000,
		EpisodeAt:       4 * time.Second,
		EpisodeReads:    8000,
		EpisodeReadRate: 8000,
		MaxStorageLoad:  5000,
		Scale:           0.01,
		MaxAttempts:     10,
		NaiveSleep:      100 * time.Millisecond,
		Seed:            1,
	}
}

// Validate names the first field that is out of range.
func (s Scenario) Validate() error {
	switch {
	case s.Duration <= 0:
		return errors.New("bench: Duration must be > 0")
	case s.Warmup < 0 || s.Warmup >= s.Duration:
		return errors.New("bench: Warmup must be in [0, Duration)")
	case s.Senders < 1:
		return errors.New("bench: Senders must be >= 1")
	case s.SendTimeout <= 0:
		return errors.New("bench: SendTimeout must be > 0")
	case s.DrainRate <= 0 || s.DrainTick <= 0 || s.DrainBurst < s.DrainTick:
		return errors.New("bench: DrainRate and DrainTick must be > 0, DrainBurst >= DrainTick")
	case s.MaxBacklog < 1:
		return errors.New("bench: MaxBacklog must be >= 1")
	case s.ArchiveMessages < 0 || s.EpisodeReads < 0:
		return errors.New("bench: ArchiveMessages and EpisodeReads must be >= 0")
	case s.Scale <= 0:
		return errors.New("bench: Scale must be > 0")
	case s.MaxAttempts < 1:
		return errors.New("bench: MaxAttempts must be >= 1")
	}
	return nil
}

// Result is one contender's run of the scenario.
type Result struct {
	Contender string `json:"contender"`
	// Runs is how many runs the figures are the median of (Median).
	Runs int `json:"runs,omitempty"`
	// Goodput is messages stored per second after the warmup.
	Goodput float64 `json:"goodput_per_s"`
	// DrainRate is the consumer's rate; Drained what it consumed per
	// second after the warmup (less when the topic ran empty).
	DrainRate float64 `json:"drain_rate_per_s"`
	Drained   float64 `json:"drained_per_s"`
	// GoodputRatio is Goodput / DrainRate. Over the window, stored =
	// consumed + the change of the backlog, so it swings by up to
	// MaxBacklog / (window * DrainRate) (11% by default) with where the
	// backlog stood at the window's ends.
	GoodputRatio float64 `json:"goodput_ratio"`
	// DrainedRatio is Drained / DrainRate: how busy the producers kept the
	// consumer, the long-run goodput over what the consumer can take,
	// without the backlog's swing.
	DrainedRatio float64 `json:"drained_ratio"`
	// Amplification is SendMessage requests the broker received per
	// message stored (1 is the least).
	Amplification float64 `json:"amplification"`
	// Attempts is the requests the broker received; Refused those it
	// answered 530, by reason.
	Attempts        int64 `json:"attempts"`
	Refused         int64 `json:"refused"`
	RefusedBacklog  int64 `json:"refused_backlog"`
	RefusedStorage  int64 `json:"refused_storage_load"`
	Sent            int64 `json:"sent"`
	Stored          int64 `json:"stored"`
	Failed          int64 `json:"failed"`
	Lost            int64 `json:"lost"`
	StoredButFailed int64 `json:"stored_but_failed"`
	// Why the failed sends failed: the error's kind, counted.
	FailedBy map[string]int64 `json:"failed_by,omitempty"`
	// Latency of sends (retries included), milliseconds.
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
	// Timing is the retry timing (rocketry only).
	Timing *Timing `json:"retry_timing,omitempty"`
	// TimerControl is the lateness of a plain time.Timer (random waits of
	// 1 to 50 ms, one goroutine) measured during the same run: what the Go
	// runtime and the machine deliver under the same load.
	TimerControl *Timing `json:"timer_control,omitempty"`
	// Timeline is the broker's state every Scenario.Trace.
	Timeline []Sample `json:"timeline,omitempty"`
	Errors   []string `json:"errors,omitempty"`
}

const (
	scenarioTopic = "bench"
	drainGroup    = "drain"
	archiveTopic  = "archive"
	archiveGroup  = "audit"
)

// Run runs the scenario against contender name on a fresh broker.
func (s Scenario) Run(ctx context.Context, name string) (*Result, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	b, err := broker.New(
		broker.WithSeed(int64(s.Seed)),
		broker.WithThrottle(broker.Throttle{MaxBacklog: s.MaxBacklog, MaxStorageLoad: s.MaxStorageLoad}),
	)
	if err != nil {
		return nil, err
	}
	if err := b.Start("127.0.0.1:0"); err != nil {
		return nil, err
	}
	defer b.Stop()

	cc, err := grpc.NewClient(b.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	consumer := rocketryv1.NewConsumerServiceClient(cc)
	if err := s.prepare(ctx, cc, consumer); err != nil {
		return nil, fmt.Errorf("bench: preparing the broker: %w", err)
	}

	var timing *timingRecorder
	set := Settings{Topic: scenarioTopic, Scaled: true, Scale: s.Scale, MaxAttempts: s.MaxAttempts, NaiveSleep: s.NaiveSleep}
	if name == Rocketry || name == RocketryNoHint {
		set.Rand = xrand.New(s.Seed, s.Seed^0x9e3779b97f4a7c15)
		timing = newTimingRecorder()
		set.Observer = timing.observe
	}
	sender, err := New(name, b.Addr(), set)
	if err != nil {
		return nil, err
	}
	defer sender.Close()

	before := b.Stats()
	res := &Result{Contender: name, DrainRate: s.DrainRate}

	bg, stopBG := context.WithCancel(ctx)
	var bgWG sync.WaitGroup
	var consumed atomic.Int64
	var bgErr atomic.Value
	start := time.Now()
	bgWG.Go(func() {
		if err := s.drain(bg, consumer, &consumed); err != nil {
			bgErr.Store(err)
		}
	})
	bgWG.Go(func() {
		if err := s.episode(bg, consumer, start); err != nil {
			bgErr.Store(err)
		}
	})

	var timeline []Sample
	if s.Trace > 0 {
		bgWG.Go(func() {
			tick := time.NewTicker(s.Trace)
			defer tick.Stop()
			for {
				select {
				case <-bg.Done():
					return
				case now := <-tick.C:
					timeline = append(timeline, sample(b, now.Sub(start), consumed.Load()))
				}
			}
		})
	}

	control := &timingRecorder{}
	if timing != nil {
		bgWG.Go(func() { controlTimer(bg, control, s.Seed) })
	}

	// Snapshot at the end of the warmup.
	var warmStored, warmConsumed int64
	var warmAt time.Time
	warmDone := make(chan struct{})
	bgWG.Go(func() {
		defer close(warmDone)
		t := time.NewTimer(s.Warmup)
		defer t.Stop()
		select {
		case <-t.C:
		case <-bg.Done():
			return
		}
		warmAt, warmStored, warmConsumed = time.Now(), topicStored(b), consumed.Load()
	})

	body := make([]byte, s.BodyBytes)
	ids := NewIDs(name)
	stopAt := start.Add(s.Duration)
	var sent, failed atomic.Int64
	lat := make([][]time.Duration, s.Senders)
	okIDs := make([][]string, s.Senders)
	failedIDs := make([][]string, s.Senders)
	var whyMu sync.Mutex
	why := map[string]int64{}
	var sendWG sync.WaitGroup
	for i := range s.Senders {
		sendWG.Go(func() {
			for time.Now().Before(stopAt) && ctx.Err() == nil {
				id := ids.Next()
				sctx, cancel := context.WithTimeout(ctx, s.SendTimeout)
				t0 := time.Now()
				err := sender.Send(sctx, id, body)
				lat[i] = append(lat[i], time.Since(t0))
				cancel()
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					failedIDs[i] = append(failedIDs[i], id)
					whyMu.Lock()
					why[failureKind(err)]++
					whyMu.Unlock()
					continue
				}
				okIDs[i] = append(okIDs[i], id)
			}
		})
	}
	time.Sleep(time.Until(stopAt))
	<-warmDone
	endAt, endStored, endConsumed := time.Now(), topicStored(b), consumed.Load()
	sendWG.Wait() // the sends in flight finish (bounded by SendTimeout)
	stopBG()
	bgWG.Wait()
	if err, ok := bgErr.Load().(error); ok && ctx.Err() == nil {
		res.Errors = append(res.Errors, err.Error())
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	after := b.Stats()
	window := endAt.Sub(warmAt).Seconds()
	res.Goodput = float64(endStored-warmStored) / window
	res.Drained = float64(endConsumed-warmConsumed) / window
	res.GoodputRatio = res.Goodput / s.DrainRate
	res.DrainedRatio = res.Drained / s.DrainRate
	res.Attempts = after.GetSendRequests() - before.GetSendRequests()
	res.RefusedBacklog = after.GetThrottled()["BACKLOG"] - before.GetThrottled()["BACKLOG"]
	res.RefusedStorage = after.GetThrottled()["STORAGE_LOAD"] - before.GetThrottled()["STORAGE_LOAD"]
	res.Refused = res.RefusedBacklog + res.RefusedStorage + after.GetThrottled()["SEND_RATE"] - before.GetThrottled()["SEND_RATE"]
	res.Sent, res.Failed = sent.Load(), failed.Load()
	if len(why) > 0 {
		res.FailedBy = why
	}

	stored := map[string]bool{}
	for _, m := range b.Messages(scenarioTopic) {
		stored[m.GetMessage().GetMessageId()] = true
	}
	res.Stored = int64(len(stored))
	if res.Stored > 0 {
		res.Amplification = float64(res.Attempts) / float64(res.Stored)
	}
	for i := range okIDs {
		for _, id := range okIDs[i] {
			if !stored[id] {
				res.Lost++
			}
		}
		for _, id := range failedIDs[i] {
			if stored[id] {
				res.StoredButFailed++
			}
		}
	}
	all := slices.Concat(lat...)
	res.P50ms, res.P99ms = percentileMs(all, 0.50), percentileMs(all, 0.99)
	if timing != nil {
		res.Timing = timing.result()
		res.TimerControl = control.result()
	}
	res.Timeline = timeline
	return res, nil
}
