package pace

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"golang.org/x/time/rate"
)

// This file runs the pacer against every shape of throttling of issue 20,
// in a synctest bubble: senders that make attempts as the executor does
// (wait for the pacer unless the last attempt failed, attempt, record the
// outcome, wait the throttle schedule after a refusal: 1 s, x1.6, up to 5
// attempts), against a broker simulated in the bubble, with pacing on and
// off. The figures are the ratios of issue 20's targets; time is the
// bubble's, so they do not depend on the machine.

// simShape is a broker: refuse says whether an attempt of message id (its
// n-th attempt, from 1) to topic at now is refused, and with what error.
type simShape interface {
	refuse(topic string, id, n int, now time.Time) error
}

// simRTT is every attempt's time.
var simRTT = 200 * time.Microsecond

// simSettle is when the refusals of the first instant are behind: every
// sender in flight when the bucket first runs dry is refused, whatever
// the pacer does, and waits out its schedule (1 s +/-20%).
const simSettle = 2 * time.Second

// simJitter is the throttle schedule's jitter, as the executor's: each
// delay is drawn in +/-20% of its nominal value.
const simJitter = 0.2

var (
	errSimRate = errors.New("sim: 530 SEND_RATE")
	errSimBusy = errors.New("sim: 42900 [TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while")
)

// bucketShape is a token bucket for every topic.
type bucketShape struct{ lim *rate.Limiter }

func (b *bucketShape) refuse(_ string, _, _ int, now time.Time) error {
	if b.lim.AllowN(now, 1) {
		return nil
	}
	return errSimRate
}

// stallShape is a token bucket behind a server that stalls for stall
// about every period (a collection, a descheduled process): the requests
// that arrive in a stall reach the bucket together at its end, and those
// over its burst are refused, at any rate near its capacity.
type stallShape struct {
	lim    *rate.Limiter
	period time.Duration
	stall  time.Duration
	mu     sync.Mutex
	rnd    *rand.Rand
	next   time.Time // the next stall's start
}

func (s *stallShape) refuse(_ string, _, _ int, now time.Time) error {
	s.mu.Lock()
	for s.next.IsZero() || now.After(s.next.Add(s.stall)) {
		if s.next.IsZero() {
			s.next = now
		}
		s.next = s.next.Add(time.Duration(float64(s.period) * (0.5 + s.rnd.Float64())))
	}
	next, end := s.next, s.next.Add(s.stall)
	s.mu.Unlock()
	if now.After(next) {
		time.Sleep(end.Sub(now))
		now = time.Now()
	}
	if s.lim.AllowN(now, 1) {
		return nil
	}
	return errSimRate
}

// hotShape refuses topic "hot" always (a backlog).
type hotShape struct{}

func (hotShape) refuse(topic string, _, _ int, _ time.Time) error {
	if topic == "hot" {
		return errSimRate
	}
	return nil
}

// oneInTenShape refuses one message in ten, once.
type oneInTenShape struct{}

func (oneInTenShape) refuse(_ string, id, n int, _ time.Time) error {
	h := uint64(id) * 0x9E3779B97F4A7C15 // a hash: one in ten, not the same turn of every sender
	if (h^h>>29)%10 == 0 && n == 1 {
		return errSimRate
	}
	return nil
}

// queueShape is a send queue served at a rate, whose requests that would
// wait over 200 ms in it are refused (RocketMQ's [TIMEOUT_CLEAN_QUEUE]),
// having waited the 200 ms.
type queueShape struct {
	mu   sync.Mutex
	rate float64
	next time.Time // when the server is free
}

func (q *queueShape) admit(now time.Time) (time.Duration, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	at := now
	if q.next.After(now) {
		at = q.next
	}
	if at.Sub(now) > 200*time.Millisecond {
		return 200 * time.Millisecond, false
	}
	q.next = at.Add(time.Duration(float64(time.Second) / q.rate))
	return at.Sub(now), true
}

func (q *queueShape) refuse(string, int, int, time.Time) error { return nil }

// simRun is what one run measured.
type simRun struct {
	stored, attempts, failed int
	inWindow                 int // stored by the end of the duration
	inSteady                 int // of which after simSettle
	elapsed                  time.Duration
	p99                      time.Duration
	byTopic                  map[string]time.Duration // last send's end, per topic
}

// simulate runs senders each sending count messages (count 0: until
// duration) to the topic topicOf(sender) against shape, with pacing on or
// off, and returns the figures. It must run in a synctest bubble.
func simulate(shape simShape, senders, count int, duration time.Duration, topicOf func(int) string, pacing bool) simRun {
	var ps Pacers

	var mu sync.Mutex
	run := simRun{byTopic: map[string]time.Duration{}}
	var lat []time.Duration
	start := time.Now()
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(s), 20))
			topic := topicOf(s)
			for i := 0; count == 0 || i < count; i++ {
				if count == 0 && time.Since(start) >= duration {
					return
				}
				id := s*1_000_000 + i
				t0 := time.Now()
				ok, attempts := simSend(shape, &ps, topic, id, pacing, rnd)
				mu.Lock()
				run.attempts += attempts
				if ok {
					run.stored++
					if at := time.Since(start); count == 0 && at <= duration {
						run.inWindow++
						if at > simSettle {
							run.inSteady++
						}
					}
				} else {
					run.failed++
				}
				lat = append(lat, time.Since(t0))
				run.byTopic[topic] = max(run.byTopic[topic], time.Since(start))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	run.elapsed = time.Since(start)
	slices.Sort(lat)
	if len(lat) > 0 {
		run.p99 = lat[len(lat)*99/100]
	}
	return run
}

// simSend is one send, as the executor makes it.
func simSend(shape simShape, ps *Pacers, topic string, id int, pacing bool, rnd *rand.Rand) (bool, int) {
	pc := Pace{}
	if pacing {
		pc = ps.Of(topic)
	}
	delay := time.Second
	for n := 1; n <= 5; n++ {
		if ok, _ := pc.Wait(context.Background()); !ok {
			return false, n - 1
		}
		start := time.Now()
		time.Sleep(simRTT / 2)
		err := shape.refuse(topic, id, n, time.Now())
		if q, ok := shape.(*queueShape); ok {
			d, admitted := q.admit(time.Now())
			time.Sleep(d)
			if !admitted {
				err = errSimBusy
			}
		}
		time.Sleep(simRTT / 2)
		// As the producer reads them: errSimBusy names the broker's send
		// queue, errSimRate the topic's send rate.
		r := Stored
		switch {
		case errors.Is(err, errSimBusy):
			r = ThrottledWide
		case err != nil:
			r = Throttled
		}
		pc.Record(r, start, time.Now())
		if err == nil {
			return true, n
		}
		if n == 5 {
			return false, n
		}
		jittered := time.Duration(float64(delay) * (1 + simJitter*(2*rnd.Float64()-1)))
		time.Sleep(max(jittered-time.Since(start), 0))
		delay = time.Duration(float64(delay) * 1.6)
	}
	return false, 5
}

func (r simRun) String() string {
	return fmt.Sprintf("%d stored, %.3f attempts/stored, %d failed, %v, p99 %v", r.stored, float64(r.attempts)/math.Max(1, float64(r.stored)), r.failed, r.elapsed, r.p99)
}

// TestPacerShapeHotBesideCold: topic "hot" is refused always; topic "cold"
// on the same endpoint is never throttled, and takes as long paced as not.
func TestPacerShapeHotBesideCold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		topicOf := func(s int) string {
			if s%2 == 0 {
				return "hot"
			}
			return "cold"
		}
		on := simulate(hotShape{}, 32, 100, 0, topicOf, true)
		off := simulate(hotShape{}, 32, 100, 0, topicOf, false)
		t.Logf("paced %v; cold %v\nunpaced %v; cold %v", on, on.byTopic["cold"], off, off.byTopic["cold"])
		assert.LessOrEqual(t, float64(on.byTopic["cold"]), 1.2*float64(off.byTopic["cold"]), "cold within 1.2x of pacing off")
		assert.Equal(t, off.failed, on.failed, "only hot's sends fail")
	})
}

// TestPacerShapeOneInTen: one message in ten is refused once, for its own
// reasons: pacing costs at most 1.3x.
func TestPacerShapeOneInTen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		one := func(int) string { return "t" }
		on := simulate(oneInTenShape{}, 32, 300, 0, one, true)
		off := simulate(oneInTenShape{}, 32, 300, 0, one, false)
		t.Logf("paced %v\nunpaced %v", on, off)
		assert.LessOrEqual(t, float64(on.elapsed), 1.3*float64(off.elapsed))
		assert.Zero(t, on.failed)
	})
}

// TestPacerShapeBuckets: token buckets without hints, of every shape, for
// 10 s: issue 20's targets (97% of capacity, 1.1 attempts per stored
// message, 0 failed) once the first instant's refusals are behind (from
// simSettle on). Over the whole 10 s, least: in the bubble every sender
// is in flight at once when the bucket first runs dry, all of those are
// refused and wait out their first second, a loss no pacer can avoid
// (`rocketry-bench --hintless` measures each shape against a real
// server over 20 s). Pacing off reaches 15-90% with the schedule's
// jitter, 0.6-11% without.
func TestPacerShapeBuckets(t *testing.T) {
	for _, c := range []struct {
		name    string
		senders int
		rate    float64
		burst   int
		least   float64
		steady  float64
		stall   time.Duration
	}{
		// The first second's wmax is a guess, half its store rate, and
		// the probe from it is fast: 98.4-98.6% over the 10 s (94.9%
		// with the probe of a second, which took 1.5 s to find the
		// capacity).
		{"64 senders, 2,000/s, burst 200", 64, 2000, 200, 0.97, 0.97, 0},
		// Another rate: 91.4-99.6% over the 10 s, 99.8-100% after 2 s
		// (84.2-90.8% and 91.7-98.2% with the probe of a second).
		{"another rate: 32 senders, 500/s, burst 20", 32, 500, 20, 0.85, 0.97, 0},
		{"more senders than the burst", 256, 2000, 50, 0.9, 0.97, 0},
		// Each refusal puts a quarter of the senders to sleep for a
		// second, and when all four sleep at once the broker's capacity
		// is lost: the bubble's interleavings swing it from 93% to 100%.
		{"few senders", 4, 2000, 200, 0.85, 0.92, 0},
		// A bucket of 5 (2.5 ms of its rate) refuses attempts that reach
		// it together: 99.3-99.5% after 2 s. Over the 10 s, least 80%:
		// in some interleavings (more of them under -race) every sender
		// is refused in the first instant (5 stored, 64 refused), sleeps
		// out 0.8-1.2 s, and slow start begins from those 5 stores:
		// 86.5-87.6% in 4 of 200 runs under -race, the code before this
		// round's guesses too.
		{"small burst", 64, 2000, 5, 0.8, 0.97, 0},
		// The server stalls for 8 ms about once a second: the 16
		// requests of a stall reach a bucket of 10 together, and a
		// few are refused, at any rate near its capacity (the real
		// server's burst of 10 on a 2-core machine). The bubble's
		// interleavings swing its share after 2 s from 96.7% to 98.8%;
		// cutting at each stall's refusals, 85-90%. Over the 10 s,
		// least 80%, as the bucket of 5 (87.6% once in 120 runs under
		// -race).
		{"small burst, a server that stalls", 64, 2000, 10, 0.8, 0.96, 8 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				one := func(int) string { return "t" }
				const d = 10 * time.Second
				shape := func() simShape {
					lim := rate.NewLimiter(rate.Limit(c.rate), c.burst)
					if c.stall == 0 {
						return &bucketShape{lim: lim}
					}
					return &stallShape{lim: lim, period: time.Second, stall: c.stall, rnd: rand.New(rand.NewPCG(1, 2))}
				}
				on := simulate(shape(), c.senders, 0, d, one, true)
				off := simulate(shape(), c.senders, 0, d, one, false)
				capacity := c.rate*d.Seconds() + float64(c.burst)
				capOn := float64(on.inWindow) / capacity
				steady := float64(on.inSteady) / (c.rate * (d - simSettle).Seconds())
				t.Logf("paced %v, %.1f%% of capacity, %.1f%% after %v\nunpaced %v, %.1f%%, %.1f%% after %v", on, 100*capOn, 100*steady, simSettle,
					off, 100*float64(off.inWindow)/capacity, 100*float64(off.inSteady)/(c.rate*(d-simSettle).Seconds()), simSettle)
				assert.GreaterOrEqual(t, steady, c.steady, "share of capacity after %v", simSettle)
				assert.GreaterOrEqual(t, capOn, c.least, "share of capacity")
				assert.LessOrEqual(t, float64(on.attempts)/float64(on.stored), 1.1, "attempts per stored message")
				assert.Zero(t, on.failed)
			})
		})
	}
}

// TestPacerShapeSendQueue: a send queue that refuses what would wait over
// 200 ms ([TIMEOUT_CLEAN_QUEUE], the endpoint's scope: ThrottledWide).
func TestPacerShapeSendQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		one := func(s int) string { return fmt.Sprint("t", s%4) }
		const d = 10 * time.Second
		on := simulate(&queueShape{rate: 500}, 256, 0, d, one, true)
		off := simulate(&queueShape{rate: 500}, 256, 0, d, one, false)
		t.Logf("paced %v, %.1f%%\nunpaced %v, %.1f%%", on, 100*float64(on.inWindow)/(500*d.Seconds()), off, 100*float64(off.inWindow)/(500*d.Seconds()))
		assert.GreaterOrEqual(t, float64(on.inWindow)/(500*d.Seconds()), 0.95)
		assert.Zero(t, on.failed)
		assert.Positive(t, off.failed, "unpaced, sends run out of attempts")
	})
}

// backlogShape is a topic's BACKLOG throttling: a consumer drains the
// stored messages at rate; once the backlog reaches hi, every send is
// refused until the consumer brings it down to lo. Stores come in bursts
// between spells in which nothing is stored.
type backlogShape struct {
	mu             sync.Mutex
	rate, hi, lo   float64
	backlog        float64
	last           time.Time
	refusing, init bool
}

func (b *backlogShape) refuse(_ string, _, _ int, now time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.init {
		b.backlog = max(b.backlog-now.Sub(b.last).Seconds()*b.rate, 0)
	}
	b.init, b.last = true, now
	switch {
	case b.refusing && b.backlog <= b.lo:
		b.refusing = false
	case !b.refusing && b.backlog >= b.hi:
		b.refusing = true
	}
	if b.refusing {
		return errSimRate
	}
	b.backlog++
	return nil
}

// TestPacerShapeBacklogSpells: a BACKLOG throttle (16 senders, 5,000
// messages, a consumer at 1,000/s, refusals from a backlog of 500 down to
// 400) takes about as long paced as not: the spells refuse everything, and
// the bursts between them are the broker's to take. (The interop
// comparison met a cut from one store soon after a cut in this shape,
// with faults beside it; TestPacerCutSoonAfterACutKeepsTheRate pins that.)
func TestPacerShapeBacklogSpells(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		one := func(int) string { return "t" }
		shape := func() *backlogShape { return &backlogShape{rate: 1000, hi: 500, lo: 400} }
		on := simulate(shape(), 16, 5000/16, 0, one, true)
		off := simulate(shape(), 16, 5000/16, 0, one, false)
		t.Logf("paced %v\nunpaced %v", on, off)
		assert.LessOrEqual(t, float64(on.elapsed), 1.3*float64(off.elapsed), "paced within 1.3x of pacing off")
		assert.LessOrEqual(t, on.failed, off.failed)
	})
}

// TestPacerShapeSendersLeave: 64 senders for 3 s, then 4 of them alone,
// against the bucket of 2,000/s and a burst of 200: the 4 get the
// capacity from 5 s on. Regression: the episode's peak of 64 waiting
// still let refusals pass as lone when 4 were left, each a quarter of
// them asleep for a second: 32-81% of capacity in 4 runs of 6.
func TestPacerShapeSendersLeave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shape := &bucketShape{lim: rate.NewLimiter(2000, 200)}
		var ps Pacers
		var mu sync.Mutex
		var stored, attempts int
		start := time.Now()
		var wg sync.WaitGroup
		for s := range 64 {
			wg.Go(func() {
				rnd := rand.New(rand.NewPCG(uint64(s), 20))
				for i := 0; ; i++ {
					if el := time.Since(start); el >= 10*time.Second || (s >= 4 && el >= 3*time.Second) {
						return
					}
					ok, n := simSend(shape, &ps, "t", s*1_000_000+i, true, rnd)
					mu.Lock()
					if at := time.Since(start); at > 5*time.Second && at <= 10*time.Second {
						if ok {
							stored++
						}
						attempts += n
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		share := float64(stored) / (5 * 2000)
		t.Logf("4 senders from 5 s to 10 s: %d stored, %.1f%% of capacity, %d attempts", stored, 100*share, attempts)
		assert.GreaterOrEqual(t, share, 0.95, "share of capacity")
	})
}
