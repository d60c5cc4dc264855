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

// DefaultScenario returns the scenario `rocketry bench` runs by default.
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

// prepare creates the drain group (so that the backlog counts from the
// first message) and fills the archive topic the episode re-reads.
func (s Scenario) prepare(ctx context.Context, cc grpc.ClientConnInterface, consumer rocketryv1.ConsumerServiceClient) error {
	if _, err := consumer.ReceiveMessages(ctx, &rocketryv1.ReceiveMessagesRequest{Topic: scenarioTopic, Group: drainGroup, MaxMessages: 1, AutoCommit: true}); err != nil {
		return err
	}
	client := rocketryv1.NewMessagingServiceClient(cc)
	body := make([]byte, s.BodyBytes)
	ids := NewIDs("archive")
	for left := s.ArchiveMessages; left > 0; {
		n := min(left, broker.DefaultMaxBatch)
		req := &rocketryv1.SendMessageRequest{Messages: make([]*rocketryv1.Message, n)}
		for i := range req.Messages {
			req.Messages[i] = &rocketryv1.Message{MessageId: ids.Next(), Topic: archiveTopic, Body: body}
		}
		if _, err := client.SendMessage(ctx, req); err != nil {
			return err
		}
		left -= n
	}
	return nil
}

// drain consumes the topic at s.DrainRate (Drain).
func (s Scenario) drain(ctx context.Context, consumer rocketryv1.ConsumerServiceClient, consumed *atomic.Int64) error {
	return Drain(ctx, consumer, scenarioTopic, drainGroup, s.DrainRate, s.DrainBurst, s.DrainTick, consumed)
}

// Drain consumes topic as group at rate messages a second, every tick,
// adding what it read to consumed, until ctx ends: a token bucket with a
// burst of burst's worth, so that time with nothing to consume is lost,
// not saved up. Shared by the bench scenario and the Node.js comparison.
func Drain(ctx context.Context, consumer rocketryv1.ConsumerServiceClient, topic, group string, rate float64, burst, tick time.Duration, consumed *atomic.Int64) error {
	t := time.NewTicker(tick)
	defer t.Stop()
	most := rate * burst.Seconds()
	tokens, last := 0.0, time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			tokens = min(tokens+rate*now.Sub(last).Seconds(), most)
			last = now
			n := int32(tokens)
			if n < 1 {
				continue
			}
			resp, err := consumer.ReceiveMessages(ctx, &rocketryv1.ReceiveMessagesRequest{Topic: topic, Group: group, MaxMessages: n, AutoCommit: true})
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("bench: drain: %w", err)
			}
			got := len(resp.GetMessages())
			tokens -= float64(got)
			consumed.Add(int64(got))
		}
	}
}

// episode resets the archive group to 0 at s.EpisodeAt and re-reads
// s.EpisodeReads messages at s.EpisodeReadRate.
func (s Scenario) episode(ctx context.Context, consumer rocketryv1.ConsumerServiceClient, start time.Time) error {
	if s.EpisodeReads <= 0 || s.EpisodeReadRate <= 0 {
		return nil
	}
	t := time.NewTimer(time.Until(start.Add(s.EpisodeAt)))
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return nil
	}
	return ReRead(ctx, consumer, archiveTopic, archiveGroup, s.EpisodeReads, s.EpisodeReadRate, s.DrainTick)
}

// ReRead is a storage-load episode: it resets group's offset of topic to 0
// and re-reads reads messages at rate per second, in steps of tick, with
// auto-commit, until they are read, the topic has no more, or ctx ends (not
// an error).
func ReRead(ctx context.Context, consumer rocketryv1.ConsumerServiceClient, topic, group string, reads int, rate float64, tick time.Duration) error {
	if _, err := consumer.ResetOffset(ctx, &rocketryv1.ResetOffsetRequest{Topic: topic, Group: group, Offset: 0}); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("bench: episode: %w", err)
	}
	tk := time.NewTicker(tick)
	defer tk.Stop()
	t0 := time.Now()
	read := 0
	for read < reads {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tk.C:
			want := min(int(rate*now.Sub(t0).Seconds()), reads) - read
			if want < 1 {
				continue
			}
			resp, err := consumer.ReceiveMessages(ctx, &rocketryv1.ReceiveMessagesRequest{Topic: topic, Group: group, MaxMessages: int32(want), AutoCommit: true})
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("bench: episode: %w", err)
			}
			if len(resp.GetMessages()) == 0 {
				return nil
			}
			read += len(resp.GetMessages())
		}
	}
	return nil
}

// Sample is the broker's state at one moment of a run.
type Sample struct {
	AtMs          int64 `json:"at_ms"`
	Stored        int64 `json:"stored"`
	Consumed      int64 `json:"consumed"`
	Backlog       int64 `json:"backlog"`
	Requests      int64 `json:"requests"`
	Refused       int64 `json:"refused"`
	BacklogOn     bool  `json:"throttled_backlog"`
	StorageLoadOn bool  `json:"throttled_storage_load"`
}

func sample(b *broker.Broker, at time.Duration, consumed int64) Sample {
	st := b.Stats()
	sm := Sample{AtMs: at.Milliseconds(), Consumed: consumed, Requests: st.GetSendRequests(), StorageLoadOn: st.GetThrottledStorageLoad()}
	for _, v := range st.GetThrottled() {
		sm.Refused += v
	}
	for _, t := range st.GetTopics() {
		if t.GetTopic() == scenarioTopic {
			sm.Stored, sm.Backlog, sm.BacklogOn = t.GetStored(), t.GetBacklog(), t.GetThrottledBacklog()
		}
	}
	return sm
}

// topicStored is the scenario topic's stored count.
func topicStored(b *broker.Broker) int64 {
	for _, t := range b.Stats().GetTopics() {
		if t.GetTopic() == scenarioTopic {
			return t.GetStored()
		}
	}
	return 0
}

// percentileMs returns the p-quantile of d in milliseconds (sorting d).
func percentileMs(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(p * float64(len(d)-1))
	return float64(d[i]) / float64(time.Millisecond)
}
