package chaos_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The chaos suite. Each test runs a producer (sync and async sends from
// several goroutines) against brokers attacked on a seeded schedule, then
// checks the invariants of checkInvariants from the brokers' stored logs,
// the callbacks and the spool, plus: no goroutine left, heap back to where
// it was.
//
// Short runs are part of `go test ./...`; ROCKETRY_CHAOS_SEEDS=N runs
// TestChaosSeeds over seeds 1..N with ROCKETRY_CHAOS_MESSAGES messages per
// run (default 5000).

// weighted is every kind of step, calm ones three times as likely, so
// that most messages get through between storms.
var weighted = append([]faultKind{fCalm, fCalm}, allFaults...)

// oneBroker is one broker under every kind of fault, with a dead-letter
// store that is replayed at the end.
func oneBroker(seed uint64, messages int) scenario {
	return scenario{
		name: "one broker", seed: seed, brokers: 1, messages: messages,
		syncWorkers: 4, asyncShare: 0.6, txShare: 0.05,
		maxAttempts: 10, attemptTimeout: 50 * time.Millisecond, maxInFlight: 64,
		tick: 15 * time.Millisecond, kinds: weighted, replay: true,
	}
}

// threeBrokersOneDown is three endpoints, one where nothing listens, the
// two others under every kind of fault, with a fallback.
func threeBrokersOneDown(seed uint64, messages int) scenario {
	return scenario{
		name: "three brokers, one down", seed: seed, brokers: 2, down: 1, messages: messages,
		syncWorkers: 4, asyncShare: 0.6, txShare: 0.05, fallback: true,
		maxAttempts: 10, attemptTimeout: 50 * time.Millisecond, maxInFlight: 64,
		tick: 15 * time.Millisecond, kinds: weighted,
	}
}

// heapSlack is how much the live heap may grow over a run: what gRPC and
// the runtime keep (pools, caches), not what the run sent.
const heapSlack = 32 << 20

// runChecked runs sc, checks its invariants, that no goroutine is left and
// that the heap came back, and returns the outcome.
func runChecked(t *testing.T, sc scenario) *outcome {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	before := heapAfterGC()
	o := runScenario(t, sc)
	checkInvariants(t, sc, o)
	goleak.VerifyNone(t, ignore)
	if after := heapAfterGC(); after > before+heapSlack {
		t.Errorf("%s (seed %d): live heap %.1f MiB after the run, %.1f MiB before; want at most %d MiB more",
			sc.name, sc.seed, float64(after)/(1<<20), float64(before)/(1<<20), heapSlack>>20)
	}
	t.Logf("%s, seed %d: %s", sc.name, sc.seed, o.summary())
	return o
}

// threeBrokersStore is three brokers, each behind a proxy, under every kind
// of fault and answers held in the proxy after the broker stored (so that
// many sends end with an unknown outcome on a broker that holds the
// message), with a dead-letter store that is replayed at the end to all
// three addresses: a record must go back where it may be stored, only.
func threeBrokersStore(seed uint64, messages int) scenario {
	return scenario{
		name: "three brokers, store replayed to all three", seed: seed, brokers: 3, messages: messages,
		syncWorkers: 4, asyncShare: 0.6, txShare: 0.05,
		maxAttempts: 10, attemptTimeout: 50 * time.Millisecond, maxInFlight: 64,
		tick: 15 * time.Millisecond, kinds: append([]faultKind{fHold, fHold}, weighted...), replay: true, proxied: true,
	}
}

func TestChaosOneBroker(t *testing.T) {
	runChecked(t, oneBroker(1, 1000))
}

func TestChaosThreeBrokersOneDown(t *testing.T) {
	runChecked(t, threeBrokersOneDown(2, 1000))
}

// TestChaosThreeBrokersStore is the end-to-end regression test of issue
// 13's first item: a store replayed to all three brokers stored messages
// already stored on one of them on another (46 of 69 replayed after one
// three-broker run), since a record did not say where its outcome was
// unknown.
func TestChaosThreeBrokersStore(t *testing.T) {
	runChecked(t, threeBrokersStore(3, 1000))
}

func TestChaosSchemeTarget(t *testing.T) {
	runChecked(t, threeBrokersScheme(3, 1000))
}

// TestChaosSeeds is the long run: ROCKETRY_CHAOS_SEEDS=20 runs the four
// scenarios over seeds 1..20 and logs the totals. With
// ROCKETRY_CHAOS_FAILOVER_ALWAYS=1 it runs the three-broker scenario with
// WithFailoverOnUnknownOutcome instead, counting the messages stored on two
// brokers.
func TestChaosSeeds(t *testing.T) {
	seeds, _ := strconv.Atoi(os.Getenv("ROCKETRY_CHAOS_SEEDS"))
	if seeds <= 0 {
		t.Skip("set ROCKETRY_CHAOS_SEEDS=N for the long run over seeds 1..N")
	}
	messages := 5000
	if m, err := strconv.Atoi(os.Getenv("ROCKETRY_CHAOS_MESSAGES")); err == nil && m > 0 {
		messages = m
	}
	if os.Getenv("ROCKETRY_CHAOS_FAILOVER_ALWAYS") == "1" {
		// The RocketMQ behaviour, for comparison: fail over after an
		// unknown outcome too. Messages stored on two brokers are
		// counted, not failed.
		var fo totals
		for s := 1; s <= seeds; s++ {
			sc := threeBrokersOneDown(uint64(s), messages)
			sc.name, sc.failoverAlways = "three brokers, one down, WithFailoverOnUnknownOutcome", true
			fo.add(runChecked(t, sc))
		}
		t.Logf("TOTAL three brokers, one down, WithFailoverOnUnknownOutcome: %v", &fo)
		return
	}
	var one, three, stored, scheme totals
	for s := 1; s <= seeds; s++ {
		one.add(runChecked(t, oneBroker(uint64(s), messages)))
		three.add(runChecked(t, threeBrokersOneDown(uint64(s), messages)))
		stored.add(runChecked(t, threeBrokersStore(uint64(s), messages)))
		scheme.add(runChecked(t, threeBrokersScheme(uint64(s), messages)))
		if t.Failed() {
			t.Fatalf("stopped at seed %d", s)
		}
	}
	t.Logf("TOTAL one broker: %v", &one)
	t.Logf("TOTAL three brokers, one down: %v", &three)
	t.Logf("TOTAL three brokers, store replayed to all three: %v", &stored)
	t.Logf("TOTAL three brokers, one down, behind a scheme target: %v", &scheme)
}
