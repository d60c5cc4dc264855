package chaos_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/producer"
	"github.com/rocketry-go/rocketry/producer/deadletter"
)

// outcome is what a run did, counted from the producer's answers, the
// brokers' stored logs and the spool.
type outcome struct {
	messages, syncSent, asyncSent, trySent, transactional int

	ok     int // sends that returned a receipt
	failed int // sends that returned a *SendError

	distinctStored   int // ids stored on at least one broker
	sameBrokerDup    int // ids stored more than once on one broker (a broken dedup)
	crossBroker      int // ids stored on two or more brokers
	crossCauses      map[string]int
	handedBack       int // store records or fallback calls
	handedBackDup    int // ids handed back more than once
	storedAndBack    int // ids both stored and handed back (unknown outcome, then failure)
	lost             int // ids neither stored nor handed back
	badCallbacks     int // async callbacks that did not run exactly once
	okNotStored      int // receipts for ids no broker holds
	failedNotSpooled int // errors whose message was not handed back
	unexpectedErrs   []string
	failKinds        map[string]int // why sends failed: the sentinel and the last code

	steps           [numFaultKinds]int
	brokerFaults    map[string]int64 // broker Stats().Faults, summed
	throttled       map[string]int64 // broker Stats().Throttled, summed
	restartErrs     int
	restartErrTexts []string

	replayed, replayMissing, replayDup int
	replayCross                        int // ids stored on two brokers after the replay, not before

	closeCancelled  bool          // Close's context ended with sends in flight
	maxThrottleWait time.Duration // the longest wait after a throttle (RetryInfo hints)

	elapsed time.Duration
}

// attemptRec is one attempt of a message: its endpoint and, when it
// failed and was retried, its gRPC code and broker code.
type attemptRec struct{ ep, res string }

// failKind names why a send failed: its sentinel and its last gRPC code.
func failKind(se *producer.SendError) string {
	why := "other"
	for _, k := range []struct {
		name string
		err  error
	}{
		{"exhausted", producer.ErrAttemptsExhausted}, {"deadline", producer.ErrDeadlineTooShort},
		{"not_retryable", producer.ErrNotRetryable}, {"budget", producer.ErrRetryBudget},
		{"closed", producer.ErrClosed}, {"ctx", context.DeadlineExceeded},
	} {
		if errors.Is(se, k.err) {
			why = k.name
			break
		}
	}
	return why + "/" + status.Code(se.Cause).String()
}

// countStored reads the brokers' stored logs into o (copies on one broker,
// the brokers' faults and throttling) and returns, per ID, the number of
// brokers that hold it.
func (o *outcome) countStored(lbs []*liveBroker) map[string]int {
	storedOn := map[string]int{}
	for _, lb := range lbs {
		perBroker := map[string]int{}
		for _, rm := range lb.b.Messages(topic) {
			perBroker[rm.GetMessage().GetMessageId()]++
		}
		for id, c := range perBroker {
			storedOn[id]++
			if c > 1 {
				o.sameBrokerDup++
			}
		}
		st := lb.b.Stats()
		for k, v := range st.GetFaults() {
			o.brokerFaults[k] += v
		}
		for k, v := range st.GetThrottled() {
			o.throttled[k] += v
		}
	}
	o.distinctStored = len(storedOn)
	return storedOn
}

// handedBack counts, per ID, what was handed back: the fallback's calls, or
// the dead-letter store's records.
func handedBack(t *testing.T, sc scenario, backCalls []atomic.Int32, store *deadletter.Store) map[string]int {
	back := map[string]int{}
	if sc.fallback {
		for i := range backCalls {
			if c := int(backCalls[i].Load()); c > 0 {
				back[msgID(sc.seed, i)] = c
			}
		}
		return back
	}
	err := store.Scan(func(d *producer.DeadLetter, err error) error {
		if err == nil {
			back[d.Message.ID]++
		}
		return err
	})
	if err != nil {
		t.Errorf("Scan() = %v; want nil", err)
	}
	return back
}
