package pacesim

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/brokercode"
	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/producer/internal/pace"
	"github.com/rocketry-go/rocketry/producer/internal/send"
)

// Producer is one producer process: its own pacers and its senders, each
// making one sync send after the other from Start until the run's end;
// sender i sends to Topics[i % len(Topics)].
type Producer struct {
	Senders int
	Start   time.Duration
	Topics  []string // "": the one topic "t"
	// Busy is the machine's noise: every wake of the producer's goroutines
	// (a turn, a backoff, an answer read) is late by an exponential time of
	// this mean, as on a loaded CPU; 0: none.
	Busy time.Duration
	// Pacing off: every refused message waits its own schedule.
	NoPacing bool
}

// Scenario is one run.
type Scenario struct {
	Seed      uint64
	Duration  time.Duration
	Broker    Broker
	Producers []Producer
	// MaxAttempts per send, the first counted: 5 by default.
	MaxAttempts int
	// Settle is when the settled figures start: the refusals of the first
	// instant, which no pacer can avoid (every sender in flight when the
	// bucket first runs dry is refused and waits out 1 s), are behind then.
	// 0: 2 s.
	Settle time.Duration
}

// WithoutPacing is sc with pacing off in every producer: the baseline.
func (sc Scenario) WithoutPacing() Scenario {
	sc.Producers = slices.Clone(sc.Producers)
	for i := range sc.Producers {
		sc.Producers[i].NoPacing = true
	}
	return sc
}

// Result is what a run measured.
type Result struct {
	Stored   int64   // sends stored
	Failed   int64   // sends that ran out of attempts
	Attempts int64   // attempts of the stored and failed sends
	Refused  int64   // attempts refused
	Capacity float64 // what the broker's buckets let through over the run, at their rates
	// Bins are the stores of each 100 ms, per producer: Bins[p][i].
	Bins [][]int64
	// RefusedBins are the refusals of each 100 ms, all producers.
	RefusedBins []int64
	// Topics are the stored sends per topic.
	Topics map[string]int64
	// Latencies of the stored sends, from the first attempt's turn taken
	// to the store.
	latencies []time.Duration
	sc        Scenario
}

// Bin is the width of Result.Bins.
const Bin = 100 * time.Millisecond

// Run runs sc and returns what it measured.
func Run(sc Scenario) *Result {
	if sc.MaxAttempts == 0 {
		sc.MaxAttempts = 5
	}
	if sc.Settle == 0 {
		sc.Settle = 2 * time.Second
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newSched(start)
	rnd := rand.New(rand.NewPCG(sc.Seed, 1))
	b := newBroker(sc.Broker, start, rand.New(rand.NewPCG(sc.Seed, 2)))
	nbins := int(sc.Duration / Bin)
	res := &Result{sc: sc, Bins: make([][]int64, len(sc.Producers)), RefusedBins: make([]int64, nbins), Topics: map[string]int64{}}
	end := start.Add(sc.Duration)
	throttle, err := backoff.NewConnection(backoff.DefaultConfig)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for pi, pr := range sc.Producers {
		res.Bins[pi] = make([]int64, nbins)
		prnd := rand.New(rand.NewPCG(sc.Seed, uint64(100+pi)))
		p := &producer{s: s, b: b, spec: pr, rnd: prnd, res: res, start: start}
		p.cfg = send.Config{
			MaxAttempts:    sc.MaxAttempts,
			AttemptTimeout: 3 * time.Second,
			Throttle:       throttle,
			Failure:        backoff.Immediate,
			Rand:           prnd,
			Logger:         slog.New(slog.DiscardHandler),
			Clock:          p,
		}
		topics := pr.Topics
		if len(topics) == 0 {
			topics = []string{"t"}
		}
		for si := range pr.Senders {
			s.spawn(start.Add(pr.Start+time.Duration(rnd.Int64N(int64(time.Millisecond)))), func() {
				topic := topics[si%len(topics)]
				for n := 0; ; n++ {
					a := &attempter{p: p, topic: topic, id: strconv.Itoa(pi) + "-" + strconv.Itoa(si) + "-" + strconv.Itoa(n)}
					x := &send.Executor{Cfg: &p.cfg, A: a, ID: a.id}
					began := s.now
					_, failed := x.Run(ctx)
					if s.done {
						return
					}
					res.Attempts += int64(x.Attempts())
					res.Refused += int64(a.refused)
					if failed {
						res.Failed++
						continue
					}
					res.Stored++
					res.Topics[topic]++
					res.latencies = append(res.latencies, s.now.Sub(began))
					if i := int(s.now.Sub(start) / Bin); i < nbins {
						res.Bins[pi][i]++
					}
				}
			})
		}
	}
	s.run(end)
	for _, bk := range capacityBuckets(sc.Broker) {
		res.Capacity += bk.capacity(0, sc.Duration)
	}
	if sc.Broker.Queue > 0 {
		res.Capacity = sc.Broker.Queue * sc.Duration.Seconds()
	}
	return res
}

// capacityBuckets are the buckets whose capacity the run is measured
// against: Default's, or else every topic's.
func capacityBuckets(b Broker) []*Bucket {
	if b.Default != nil {
		return []*Bucket{b.Default}
	}
	var out []*Bucket
	keys := make([]string, 0, len(b.Topics))
	for k := range b.Topics {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, b.Topics[k])
	}
	return out
}

// producer is one producer's state: its clock is the scheduler's, made late
// by its machine's noise.
type producer struct {
	s      *sched
	b      *broker
	spec   Producer
	rnd    *rand.Rand
	cfg    send.Config
	pacers pace.Pacers
	res    *Result
	start  time.Time
}

func (p *producer) Now() time.Time { return p.s.now }

func (p *producer) Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return !p.s.done
	}
	return p.s.until(p.s.now.Add(d + p.late()))
}

// late is how late a wake of the producer's goroutines is.
func (p *producer) late() time.Duration {
	if p.spec.Busy <= 0 {
		return 0
	}
	return time.Duration(p.rnd.ExpFloat64() * float64(p.spec.Busy))
}

// attempter carries one send's attempts to the model broker.
type attempter struct {
	p       *producer
	topic   string
	id      string
	refused int
}

func (a *attempter) Attempt(ctx context.Context, ep int, wait bool, deadline time.Time) (outcome.Outcome, bool) {
	s := a.p.s
	half := a.p.b.cfg.RTT / 2
	if !s.until(s.now.Add(half)) {
		return outcome.Outcome{Kind: outcome.FailedNotStored}, true
	}
	at, err := a.p.b.decide(a.topic, a.id, s.now)

	if !s.until(at.Add(half + a.p.late())) {
		return outcome.Outcome{Kind: outcome.FailedNotStored}, true
	}
	if err != nil {
		a.refused++
		if i := int(s.now.Sub(a.p.start) / Bin); i < len(a.p.res.RefusedBins) {
			a.p.res.RefusedBins[i]++
		}
		return outcome.Outcome{Kind: outcome.Throttled, Code: brokercode.TooManyRequests, Err: err}, false
	}
	return outcome.Outcome{Kind: outcome.Stored}, false
}

func (a *attempter) Endpoint(int) string { return "broker" }

func (a *attempter) Pacer(int) pace.Pace {
	if a.p.spec.NoPacing {
		return pace.Pace{}
	}
	return a.p.pacers.Of(a.topic)
}

func (a *attempter) Reach(int) *send.Reach { return nil }

// Ratio is the share of the capacity stored over the run.
func (r *Result) Ratio() float64 { return float64(r.Stored) / r.Capacity }

// Settled is the share of the capacity stored from Settle to the end.
func (r *Result) Settled() float64 {
	return r.storedIn(r.sc.Settle, r.sc.Duration) / r.capacityIn(r.sc.Settle, r.sc.Duration)
}

// Share is the share of the capacity stored from a to b after the start.
func (r *Result) Share(a, b time.Duration) float64 {
	return r.storedIn(a, b) / r.capacityIn(a, b)
}

func (r *Result) storedIn(a, b time.Duration) float64 {
	n := int64(0)
	for p := range r.Bins {
		n += r.producerIn(p, a, b)
	}
	return float64(n)
}

func (r *Result) producerIn(p int, a, b time.Duration) int64 {
	n := int64(0)
	for i := int(a / Bin); i < int(b/Bin) && i < len(r.Bins[p]); i++ {
		n += r.Bins[p][i]
	}
	return n
}

func (r *Result) capacityIn(a, b time.Duration) float64 {
	if r.sc.Broker.Queue > 0 {
		return r.sc.Broker.Queue * (b - a).Seconds()
	}
	c := 0.0
	for _, bk := range capacityBuckets(r.sc.Broker) {
		c += bk.capacity(a, b)
	}
	return c
}

// PerStored is the attempts per stored message.
func (r *Result) PerStored() float64 { return float64(r.Attempts) / float64(r.Stored) }

// P99 is the 99th percentile of the stored sends' latencies.
func (r *Result) P99() time.Duration {
	l := slices.Clone(r.latencies)
	if len(l) == 0 {
		return 0
	}
	slices.Sort(l)
	return l[int(math.Ceil(0.99*float64(len(l))))-1]
}

// Jain is Jain's fairness index over the producers' stores from a to b:
// 1 when they are equal, 1/n when one has them all.
func (r *Result) Jain(a, b time.Duration) float64 {
	var sum, sq float64
	for p := range r.Bins {
		x := float64(r.producerIn(p, a, b))
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(r.Bins)) * sq)
}

// FairShare is producer p's stores from a to b over a fair share of all
// the producers' stores then, among those started by a.
func (r *Result) FairShare(p int, a, b time.Duration) float64 {
	var all float64
	n := 0
	for q := range r.Bins {
		if r.sc.Producers[q].Start <= a {
			all += float64(r.producerIn(q, a, b))
			n++
		}
	}
	if all == 0 {
		return 0
	}
	return float64(r.producerIn(p, a, b)) / (all / float64(n))
}

// Reaches tells whether producer p holds share of a fair share
// (FairShare) in some second ending from 1 s to within after from, read
// every Bin.
func (r *Result) Reaches(p int, from, within time.Duration, share float64) bool {
	for end := from + time.Second; end <= from+within; end += Bin {
		if r.FairShare(p, end-time.Second, end) >= share {
			return true
		}
	}
	return false
}

// Trace is a hash of every bin of every producer: the same scenario gives
// the same trace.
func (r *Result) Trace() uint64 {
	h := fnv.New64a()
	for _, bins := range r.Bins {
		for _, n := range bins {
			fmt.Fprintf(h, "%d,", n)
		}
	}
	fmt.Fprintf(h, "%d/%d/%d", r.Attempts, r.Refused, r.Failed)
	return h.Sum64()
}

// String is the run's figures on one line.
func (r *Result) String() string {
	return fmt.Sprintf("%.1f%% of capacity (settled %.1f%%), %.3f att/stored, %d failed, %d refused (%.2f%%), p99 %v",
		100*r.Ratio(), 100*r.Settled(), r.PerStored(), r.Failed, r.Refused, 100*float64(r.Refused)/float64(r.Attempts), r.P99().Round(time.Millisecond))
}
