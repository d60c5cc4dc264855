package pace

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// This file tests the controller's rules one at a time, feeding it exact
// times; producer/internal/pacesim runs it with the executor against
// shapes of throttling.

var t0 = time.Unix(1000, 0)

// stores records n stores at rate a second from at, each answered at once;
// it returns the time after the last.
func stores(p *Pacer, at time.Time, n int, rate float64) time.Time {
	gap := time.Duration(float64(time.Second) / rate)
	for range n {
		p.stored(at, at)
		at = at.Add(gap)
	}
	return at
}

// open opens an episode on p: a second of stores at rate, then refusals
// of half the attempts.
func open(t *testing.T, p *Pacer, rate float64) time.Time {
	t.Helper()
	at := stores(p, t0, int(rate), rate)
	for i := 0; !p.on.Load(); i++ {
		require.Less(t, i, 8, "refusals of half the last 8 attempts open an episode")
		p.throttled(at, at)
		at = at.Add(time.Millisecond)
		p.stored(at, at)
	}
	return at
}

func TestPacerOpensOnAMajorityOfRefusals(t *testing.T) {
	var p Pacer
	open(t, &p, 1000)
	// The rate it opens at is what the broker stored lately, a floor the
	// probe starts from.
	assert.InDelta(t, 1000, p.rateNow(), 300, "opens near the store rate of the last second")
}

// TestPacerIgnoresOwnRefusals: one message in ten refused, once, for its
// own reasons, opens no episode.
func TestPacerIgnoresOwnRefusals(t *testing.T) {
	var p Pacer
	at := t0
	for i := range 10_000 {
		at = at.Add(100 * time.Microsecond)
		if i%10 == 3 {
			p.throttled(at, at)
		} else {
			p.stored(at, at)
		}
		require.False(t, p.on.Load(), "attempt %d", i)
	}
}

// TestPacerSpellNoEpisode: a broker that stores nothing gets no episode
// (no rate gets through: each message waits its own schedule); one that
// stops storing in an episode ends it.
func TestPacerSpellNoEpisode(t *testing.T) {
	var p Pacer
	for range 100 {
		p.throttled(t0, t0)
	}
	assert.False(t, p.on.Load(), "nothing stored, no episode")

	var q Pacer
	at := open(t, &q, 1000)
	ended := false
	for i := range 30 {
		left := at.Add(time.Duration(i) * 10 * time.Millisecond)
		q.throttled(left, left)
		if !q.on.Load() {
			ended = true
			break
		}
	}
	assert.True(t, ended, "nothing stored for a window of refusals ends the episode")
}

// TestPacerSilenceIsNoSpell: a refusal after a window in which nothing
// was answered (every sender asleep on its own schedule) is no spell's;
// refusals for a window without a store are.
func TestPacerSilenceIsNoSpell(t *testing.T) {
	var p Pacer
	at := open(t, &p, 1000)
	at = at.Add(2 * window)
	p.throttled(at, at)
	assert.True(t, p.on.Load(), "a silence is no spell")
	ended := false
	for i := range 30 {
		left := at.Add(time.Duration(i+1) * 10 * time.Millisecond)
		p.throttled(left, left)
		if !p.on.Load() {
			ended = true
			break
		}
	}
	assert.True(t, ended, "refusals for a window without a store end the episode")
}

// endedNotTheRates runs an episode of p at 1000 a second for a second and
// ends it on refusals judged not the rate's; it returns the time of the end.
func endedNotTheRates(t *testing.T, p *Pacer) time.Time {
	t.Helper()
	at := stores(p, open(t, p, 1000), 1000, 1000)
	p.mu.Lock()
	p.notTheRatesLocked(at)
	p.mu.Unlock()
	require.False(t, p.on.Load())
	return at
}

// TestPacerReopensWhenWorse: after an episode ends on refusals not the
// rate's, a refusal opens the next when the scope stores under β of what
// it stored in the episode; while it stores as much, it takes 4 refusals
// in 8.
func TestPacerReopensWhenWorse(t *testing.T) {
	for _, tc := range []struct {
		rate  float64
		opens bool
	}{{100, true}, {1000, false}} {
		var p Pacer
		at := endedNotTheRates(t, &p)
		at = stores(&p, at, int(1.5*tc.rate), tc.rate)
		p.throttled(at, at)
		assert.Equal(t, tc.opens, p.on.Load(), "storing %v a second after an episode at 1000", tc.rate)
	}
}

// TestPacerReopensWhenWorseLater: a second at the episode's rate after
// the end (the senders let out storing their fill before each is refused
// and sleeps) confirms nothing: when the rate falls under β of it later,
// a refusal opens the next episode.
func TestPacerReopensWhenWorseLater(t *testing.T) {
	var p Pacer
	at := endedNotTheRates(t, &p)
	at = stores(&p, at, 1200, 1000) // 1.2 s as in the episode
	p.throttled(at, at)
	require.False(t, p.on.Load(), "as much as in the episode: no episode")
	at = stores(&p, at, 100, 50) // then 2 s at 50 a second
	p.throttled(at, at)
	assert.True(t, p.on.Load(), "storing 50 a second after an episode at 1000")
}

// TestPacerCutsUnderARateRefused: a refusal when store samples do not
// tell what got through (here, just after the opening) cuts to (1+β)/2
// of the rate refused, which is over what the broker takes.
func TestPacerCutsUnderARateRefused(t *testing.T) {
	var p Pacer
	at := open(t, &p, 1000)
	r := p.rateNow()
	require.Greater(t, r, p.wmax, "the probe is under way at the opening")
	at = at.Add(time.Millisecond)
	p.throttled(at, at)
	require.True(t, p.on.Load())
	assert.Less(t, p.wmax, r, "wmax under the rate refused")
	assert.Greater(t, p.wmax, beta*r, "by less than a cut's depth")
}

// TestPacerCutsInTheDipToWhatGotThrough: a refusal in a cut's dip, when
// store samples tell what got through, cuts to it, no lower.
func TestPacerCutsInTheDipToWhatGotThrough(t *testing.T) {
	var p Pacer
	at := open(t, &p, 1000).Add(time.Millisecond)
	p.throttled(at, at) // the probe refused: a cut, and its dip
	require.Less(t, p.t, p.k, "in the cut's dip")
	require.Greater(t, p.rateNow(), 300.0)
	at = stores(&p, at, 24, 300) // 80 ms at 300 a second: under 2·noiseOf answers
	p.throttled(at, at)
	require.True(t, p.on.Load())
	require.True(t, p.cut.at.Equal(at), "the first refusal in the dip cuts once more")
	assert.InDelta(t, 300, p.wmax, 15, "wmax is the rate that got through")
}

// TestPacerOneCutPerOverload: refusals of attempts that left before a cut
// are the overload it answered: they cut nothing more.
func TestPacerOneCutPerOverload(t *testing.T) {
	var p Pacer
	at := open(t, &p, 1000)
	cut, r := p.cut.at, p.rateNow()
	for i := range 20 {
		p.throttled(cut.Add(-time.Duration(i+1)*time.Millisecond), at.Add(time.Millisecond))
	}
	assert.Equal(t, cut, p.cut.at, "no cut")
	assert.Equal(t, r, p.rateNow())
}

// TestPacerCutsFromWhatGotThrough: a refusal of the probe cuts from what
// the broker stored over the last window, not from the rate refused.
func TestPacerCutsFromWhatGotThrough(t *testing.T) {
	var p Pacer
	at := open(t, &p, 1000)
	require.Greater(t, p.rateNow(), 1000.0, "the probe is under way at the opening")
	// A second in which the broker stores 800 a second: then a refusal.
	at = stores(&p, at, 800, 800)
	p.throttled(at, at)
	require.True(t, p.on.Load())
	assert.InDelta(t, 800, p.wmax, 40, "wmax is the rate that got through")
	assert.Less(t, p.rateNow(), p.wmax, "and the rate is cut under it")
}

// TestPacerHintEndsEpisode: a refusal with the broker's hint ends an
// episode: each send follows the hint.
func TestPacerHintEndsEpisode(t *testing.T) {
	var p Pacer
	open(t, &p, 1000)
	Pace{Topic: &p}.Record(Hinted, t0, t0)
	assert.False(t, p.on.Load())
}

// TestPacerQueueWaitCuts: stores that waited in the broker's queue cut
// before any refusal; those that left while the queue drained are the same
// overload.
func TestPacerQueueWaitCuts(t *testing.T) {
	var p Pacer
	// Quick stores first: the round trip with the queue empty.
	stores(&p, t0, 100, 100)
	at := open(t, &p, 1000)
	cut := p.cut.at
	at = at.Add(10 * time.Millisecond)
	p.stored(at, at.Add(100*time.Millisecond)) // waited 100 ms
	require.True(t, p.on.Load())
	assert.True(t, p.cut.at.After(cut), "a store that waited in the queue cuts")
	cut = p.cut.at
	left := cut.Add(50 * time.Millisecond) // before the queue drained at the cut's rate
	p.stored(left, left.Add(100*time.Millisecond))
	assert.Equal(t, cut, p.cut.at, "the queue was still draining")
}

// TestPacerNoiseInTheDip: one refusal in ten in a cut's dip, whatever the
// rate: after one more cut, the episode ends (the refusals are not the
// rate's); one in a hundred changes nothing.
func TestPacerNoiseInTheDip(t *testing.T) {
	for _, tc := range []struct {
		every int
		ends  bool
	}{{10, true}, {100, false}} {
		var p Pacer
		at := open(t, &p, 1000)
		for i := range 200 {
			at = at.Add(time.Millisecond)
			if i%tc.every == tc.every-1 {
				p.throttled(at, at)
			} else {
				p.stored(at, at)
			}
			if !p.on.Load() {
				break
			}
		}
		assert.Equal(t, tc.ends, !p.on.Load(), "one in %d refused", tc.every)
	}
}

// TestPacerNoiseLowersWmax: a refusal judged noise in a cut's dip cuts
// nothing, but lowers wmax (by the share refused times (1−β)·noiseOf: less
// than a cut).
func TestPacerNoiseLowersWmax(t *testing.T) {
	var p Pacer
	at := open(t, &p, 1000).Add(time.Millisecond)
	p.throttled(at, at) // the probe refused: a cut, and its dip
	at = stores(&p, at, 10, 1000)
	p.throttled(at, at) // the first refusal in the dip: the cut once more
	require.True(t, p.cut.at.Equal(at))
	at = stores(&p, at, 99, 1000)
	cut, w := p.cut.at, p.wmax
	// The share is counted since the last cut outside a dip, this refusal
	// included.
	a, f := p.answered+1-p.cutA, p.refused+1-p.cutF
	require.Less(t, f*noiseOf, a, "under 1 in noiseOf")
	p.throttled(at, at)
	require.True(t, p.on.Load())
	assert.Equal(t, cut, p.cut.at, "no cut")
	assert.Less(t, p.wmax, w, "noise lowers wmax")
	assert.Greater(t, p.wmax, beta*w, "by less than a cut")
}

// TestTurnsInOrderAtTheRate: tickets leave one every 1/r in the order they
// were taken, move with the rate, and a cut voids them.
func TestTurnsInOrderAtTheRate(t *testing.T) {
	var tr turns
	tr.reset(t0, 100)
	a, b := tr.take(t0), tr.take(t0)
	assert.Equal(t, 10*time.Millisecond, tr.at(b).Sub(tr.at(a)))
	assert.Equal(t, t0.Add(10*time.Millisecond), tr.at(a), "the first 1/r after the cut")
	tr.setRate(t0, 200)
	assert.Equal(t, 5*time.Millisecond, tr.at(b).Sub(tr.at(a)), "they move with the rate")
	cuts := tr.cuts
	tr.reset(t0.Add(time.Millisecond), 50)
	assert.NotEqual(t, cuts, tr.cuts, "a cut voids them")
	c := tr.take(t0.Add(time.Millisecond))
	assert.Equal(t, t0.Add(21*time.Millisecond), tr.at(c), "the first new one 1/r after the cut")
	// After a pause, a few are due at once, not all.
	late := t0.Add(time.Second)
	due := 0
	for range 10 {
		if !tr.at(tr.take(late)).After(late) {
			due++
		}
	}
	assert.Equal(t, 1, due, "a burst of 2 ms of the rate, one turn at least")
}

// fake is a clock whose waits end at once and move its time on.
type fake struct {
	now   time.Time
	waits []time.Duration
}

func (f *fake) Now() time.Time { return f.now }
func (f *fake) Sleep(ctx context.Context, d time.Duration) bool {
	f.waits = append(f.waits, d)
	f.now = f.now.Add(d)
	return ctx.Err() == nil
}

// TestWaitTakesTurnsAndKnowsDeadlines: attempts wait their turns; a turn
// after the caller's deadline is not waited for (late), and is given back.
func TestWaitTakesTurnsAndKnowsDeadlines(t *testing.T) {
	var p Pacer
	f := &fake{now: t0}
	p.Hold(t0, 10)
	pc := Pace{Topic: &p}
	ok, late := pc.Wait(context.Background(), f)
	require.True(t, ok)
	assert.False(t, late)
	assert.Empty(t, f.waits, "the first turn is free")
	ok, _ = pc.Wait(context.Background(), f)
	require.True(t, ok)
	assert.GreaterOrEqual(t, f.now.Sub(t0), 80*time.Millisecond, "the next about 1/r later")

	ctx, cancel := context.WithDeadline(context.Background(), f.now.Add(time.Millisecond))
	defer cancel()
	next := p.turns.next
	ok, late = pc.Wait(ctx, f)
	assert.False(t, ok)
	assert.True(t, late, "the turn is after the deadline")
	assert.Equal(t, next, p.turns.next, "and is given back")
}

// TestOffCostsNothing: a pacer with no episode costs no allocation on an
// attempt's path.
func TestOffCostsNothing(t *testing.T) {
	var ps Pacers
	pc := ps.Of("t")
	ctx := context.Background()
	n := testing.AllocsPerRun(1000, func() {
		pc.Wait(ctx, nil)
		pc.Record(Stored, t0, t0)
	})
	assert.Zero(t, n)
}

func BenchmarkPaceOff(b *testing.B) {
	var ps Pacers
	ctx := context.Background()
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			pc := ps.Of("t")
			pc.Wait(ctx, nil)
			pc.Record(Stored, now, now)
		}
	})
}
