package chaos_test

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// strictCrossBroker makes a message stored on two different brokers fail
// the test. Each broker deduplicates only its own log; since d7e3dd1 and
// a98549e the producer no longer fails over after an unknown outcome (an
// attempt's timeout, a lost connection), so this cannot happen with the
// default options. ROCKETRY_CHAOS_ALLOW_CROSS=1 only reports them (to
// measure WithFailoverOnUnknownOutcome, say).
var strictCrossBroker = os.Getenv("ROCKETRY_CHAOS_ALLOW_CROSS") != "1"

// checkInvariants fails t for every broken promise of o:
//   - lost: every message is stored or handed back (spool or fallback);
//   - stored twice by one broker;
//   - handed back twice;
//   - an async callback that did not run exactly once;
//   - a receipt for a message no broker holds, an error whose message was
//     not handed back, an error that is not a *SendError;
//   - after a replay, a message missing, stored twice by one broker, or
//     stored on a second broker;
//   - a broker restart that failed;
//   - a message stored on two brokers (unless ROCKETRY_CHAOS_ALLOW_CROSS=1).
func checkInvariants(t *testing.T, sc scenario, o *outcome) {
	t.Helper()
	for _, c := range []struct {
		name string
		got  int
	}{
		{"lost", o.lost},
		{"stored twice by one broker", o.sameBrokerDup},
		{"handed back twice", o.handedBackDup},
		{"async callbacks not run exactly once", o.badCallbacks},
		{"receipts for messages no broker holds", o.okNotStored},
		{"errors whose message was not handed back", o.failedNotSpooled},
		{"missing after replay", o.replayMissing},
		{"stored twice by one broker after replay", o.replayDup},
		{"stored on a second broker by the replay", o.replayCross},
		{"broker restarts that failed", o.restartErrs},
	} {
		if c.got != 0 {
			t.Errorf("%s (seed %d): %s = %d; want 0", sc.name, sc.seed, c.name, c.got)
		}
	}
	if o.ok+o.failed != o.messages {
		t.Errorf("%s (seed %d): %d receipts + %d errors = %d answers; want one per message, %d", sc.name, sc.seed, o.ok, o.failed, o.ok+o.failed, o.messages)
	}
	if o.handedBack != o.failed {
		t.Errorf("%s (seed %d): %d messages handed back; want one per failed send, %d", sc.name, sc.seed, o.handedBack, o.failed)
	}
	for i, e := range o.unexpectedErrs {
		if i == 5 {
			t.Errorf("... and %d more", len(o.unexpectedErrs)-5)
			break
		}
		t.Errorf("%s (seed %d): %s", sc.name, sc.seed, e)
	}
	if o.restartErrs > 0 {
		t.Errorf("%s (seed %d): Restart errors: %q", sc.name, sc.seed, o.restartErrTexts)
	}
	if strictCrossBroker && !sc.failoverAlways && o.crossBroker != 0 {
		t.Errorf("%s (seed %d): %d messages stored on two brokers (moves away from a broker that stored it, by the answer that made the producer move: %s); want 0",
			sc.name, sc.seed, o.crossBroker, causesString(o.crossCauses))
	}
}

// summary is one line of figures for the log and RELIABILITY.md.
func (o *outcome) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d messages (%d sync, %d async of which %d TrySendAsync, %d transactional) in %v: "+
		"%d stored, %d failed and handed back (%d of them also stored: unknown outcome), lost %d, "+
		"stored twice by one broker %d, on two brokers %d",
		o.messages, o.syncSent, o.asyncSent, o.trySent, o.transactional, o.elapsed.Round(1e6),
		o.ok, o.failed, o.storedAndBack, o.lost, o.sameBrokerDup, o.crossBroker)
	if o.crossBroker > 0 {
		fmt.Fprintf(&b, " (moves away from a broker that stored it, by the answer that made the producer move: %s)", causesString(o.crossCauses))
	}
	if o.replayed > 0 || o.replayMissing > 0 {
		fmt.Fprintf(&b, "; replayed %d, missing after replay %d, stored on a second broker by the replay %d", o.replayed, o.replayMissing, o.replayCross)
	}
	fmt.Fprintf(&b, "; failures by kind %s; longest wait after a throttle %v", mapString(o.failKinds), o.maxThrottleWait.Round(time.Millisecond))
	if o.closeCancelled {
		b.WriteString("; Close cancelled the sends still in flight")
	}
	fmt.Fprintf(&b, "; schedule steps %s; broker faults %s; throttled %s",
		stepsString(o.steps), mapString(o.brokerFaults), mapString(o.throttled))
	return b.String()
}

func stepsString(s [numFaultKinds]int) string {
	var parts []string
	for k, n := range s {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", faultNames[k], n))
		}
	}
	return strings.Join(parts, " ")
}

func mapString[V int | int64](m map[string]V) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

func causesString(m map[string]int) string { return mapString(m) }

// heapAfterGC is the live heap after two collections.
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// totals adds up outcomes over seeds, for the long run's report.
type totals struct {
	runs                                                         int
	messages, ok, failed, storedAndBack, lost, sameDup, crossDup int
	replayed, replayCross                                        int
	closeCancelled                                               int
	maxThrottleWait                                              time.Duration
	steps                                                        [numFaultKinds]int
	brokerFaults, throttled                                      map[string]int64
	crossCauses                                                  map[string]int
}

func (s *totals) add(o *outcome) {
	if s.brokerFaults == nil {
		s.brokerFaults, s.throttled, s.crossCauses = map[string]int64{}, map[string]int64{}, map[string]int{}
	}
	s.runs++
	s.messages += o.messages
	s.ok += o.ok
	s.failed += o.failed
	s.storedAndBack += o.storedAndBack
	s.lost += o.lost
	s.sameDup += o.sameBrokerDup
	s.crossDup += o.crossBroker
	s.replayed += o.replayed
	s.replayCross += o.replayCross
	if o.closeCancelled {
		s.closeCancelled++
	}
	s.maxThrottleWait = max(s.maxThrottleWait, o.maxThrottleWait)
	for k, n := range o.steps {
		s.steps[k] += n
	}
	for k, v := range o.brokerFaults {
		s.brokerFaults[k] += v
	}
	for k, v := range o.throttled {
		s.throttled[k] += v
	}
	for k, v := range o.crossCauses {
		s.crossCauses[k] += v
	}
}

func (s *totals) String() string {
	return fmt.Sprintf("%d runs, %d messages: %d stored, %d failed and handed back (%d of them also stored), replayed %d (stored on a second broker by the replay %d); "+
		"lost %d, stored twice by one broker %d, stored on two brokers %d (moves away from a broker that stored it, by the answer that made the producer move: %s); "+
		"schedule steps %s; broker faults %s; throttled %s; runs whose Close cancelled sends %d; longest wait after a throttle %v",
		s.runs, s.messages, s.ok, s.failed, s.storedAndBack, s.replayed, s.replayCross, s.lost, s.sameDup, s.crossDup, causesString(s.crossCauses),
		stepsString(s.steps), mapString(s.brokerFaults), mapString(s.throttled), s.closeCancelled, s.maxThrottleWait.Round(time.Millisecond))
}
