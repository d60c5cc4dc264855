package broker

import (
	"context"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/internal/xrand"
)

// Faults are failures the broker injects into SendMessage calls on purpose,
// for tests, on both protocols (rocketry.v1 and apache.rocketmq.v2). The
// zero Faults injects nothing. The rates are shares of calls in [0, 1]; one
// random draw per call picks at most one of blackhole, drop, internal and
// stored-internal, so their sum must not be above 1. Which calls get a fault is
// decided by the broker's random source (see WithSeed), so that it is the
// same for the same sequence of calls.
//
// Faults apply to valid requests only: an invalid request is answered 4xx
// first.
type Faults struct {
	// InternalRate is the share of SendMessage calls answered INTERNAL
	// (500 INTERNAL_ERROR); nothing is stored.
	InternalRate float64
	// Latency is added before answering each SendMessage call; 0 means
	// none.
	Latency time.Duration
	// BlackholeRate is the share of calls never answered until the
	// caller's context ends or the broker stops; nothing is stored.
	BlackholeRate float64
	// DropRate is the share of calls whose client connection is closed
	// instead of answering; nothing is stored.
	DropRate float64
	// Unavailable answers every SendMessage call 503 UNAVAILABLE, as a
	// broker shutting down does.
	Unavailable bool
	// StoredInternalRate is the share of SendMessage calls whose messages
	// are stored (as any other send: a duplicate stays a duplicate where
	// the face deduplicates) and then answered INTERNAL all the same:
	// rocketry.v1 500 INTERNAL_ERROR, apache.rocketmq.v2 50001
	// INTERNAL_SERVER_ERROR, as the RocketMQ 5 proxy answers a send whose
	// broker wrote the messages but whose answer failed on the way back
	// (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/producer/SendMessageActivity.java
	// hands the exception to buildStatus in
	// proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/common/ResponseBuilder.java,
	// which answers any exception it does not know 50001). Its code is
	// InternalRate's, under which nothing is stored (only the status text
	// differs), so a client that goes by the code cannot tell them apart: a
	// resend of it is a copy on a face that does not deduplicate. A call
	// refused before it is stored (throttled, invalid) keeps that answer.
	// On rocketry.v1 it breaks that face's contract (a 500 with its detail
	// says nothing was stored, and a producer may send the message to
	// another broker): use it there to test a client that must not trust
	// the answer.
	StoredInternalRate float64
}

// Validate reports whether f is usable: rates in [0, 1] with a sum of at
// most 1 and no negative latency. Its error names the field and wraps
// ErrInvalidFaults.
func (f Faults) Validate() error {
	bad := func(format string, args ...any) error {
		return &invalidError{kind: ErrInvalidFaults, msg: fmt.Sprintf(format, args...)}
	}
	for _, r := range []struct {
		name string
		v    float64
	}{{"InternalRate", f.InternalRate}, {"BlackholeRate", f.BlackholeRate}, {"DropRate", f.DropRate}, {"StoredInternalRate", f.StoredInternalRate}} {
		if math.IsNaN(r.v) || r.v < 0 || r.v > 1 {
			return bad("%s %v is not in [0, 1]", r.name, r.v)
		}
	}
	if s := f.InternalRate + f.BlackholeRate + f.DropRate + f.StoredInternalRate; s > 1+1e-9 {
		return bad("InternalRate+BlackholeRate+DropRate+StoredInternalRate = %v is above 1", s)
	}
	if f.Latency < 0 {
		return bad("Latency %v is negative", f.Latency)
	}
	return nil
}

func (f *Faults) random() bool {
	return f.InternalRate > 0 || f.BlackholeRate > 0 || f.DropRate > 0 || f.StoredInternalRate > 0
}

// faultKind is a kind of injected fault, the key of its count in stats.
type faultKind int

const (
	faultNone faultKind = iota
	faultInternal
	faultLatency
	faultBlackhole
	faultDrop
	faultUnavailable
	faultStoredInternal
	numFaultKinds
)

// faultNames are the names of the fault kinds in stats.
var faultNames = [numFaultKinds]string{
	faultInternal:       "internal",
	faultLatency:        "latency",
	faultBlackhole:      "blackhole",
	faultDrop:           "drop",
	faultUnavailable:    "unavailable",
	faultStoredInternal: "stored_internal",
}

// pick draws which random fault, if any, a call gets.
func (f *Faults) pick(r *xrand.Locked) faultKind {
	if !f.random() {
		return faultNone
	}
	u := r.Float64()
	switch {
	case u < f.BlackholeRate:
		return faultBlackhole
	case u < f.BlackholeRate+f.DropRate:
		return faultDrop
	case u < f.BlackholeRate+f.DropRate+f.InternalRate:
		return faultInternal
	case u < f.BlackholeRate+f.DropRate+f.InternalRate+f.StoredInternalRate:
		return faultStoredInternal
	}
	return faultNone
}

// injectFaults applies the configured faults to one send call; a non-nil
// refusal is the call's answer, and nothing is stored. A non-nil after is
// the answer the call gets once its messages are stored
// (StoredInternalRate).
func (b *Broker) injectFaults(ctx context.Context) (r, after *refusal) {
	f := b.faults.Load()
	if f.Latency > 0 {
		b.faultCount[faultLatency].Add(1)
		t := time.NewTimer(f.Latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctxRefusal(ctx, faultLatency), nil
		case <-b.stopCh:
			t.Stop()
			return unavailable(faultLatency, "broker: stopping"), nil
		}
	}
	if f.Unavailable {
		b.faultCount[faultUnavailable].Add(1)
		return unavailable(faultUnavailable, "broker: unavailable (injected fault)"), nil
	}
	switch k := f.pick(b.rng); k {
	case faultBlackhole:
		b.faultCount[k].Add(1)
		select {
		case <-ctx.Done():
			return ctxRefusal(ctx, k), nil
		case <-b.stopCh:
			return unavailable(k, "broker: stopping"), nil
		}
	case faultDrop:
		b.faultCount[k].Add(1)
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			b.srvMu.Lock()
			tl := b.lis
			b.srvMu.Unlock()
			if tl != nil {
				tl.closeConn(p.Addr.String())
			}
		}
		return unavailable(k, "broker: connection dropped (injected fault)"), nil
	case faultInternal:
		b.faultCount[k].Add(1)
		return &refusal{code: rocketryv1.Code_CODE_INTERNAL_ERROR, fault: k, msg: "broker: internal error (injected fault); nothing stored"}, nil
	case faultStoredInternal: // counted when stored: see send
		return nil, &refusal{code: rocketryv1.Code_CODE_INTERNAL_ERROR, fault: k, msg: "broker: internal error (injected fault) after the messages were stored"}
	}
	return nil, nil
}

// unavailable is a 503 UNAVAILABLE refusal caused by fault k.
func unavailable(k faultKind, msg string) *refusal {
	return &refusal{code: rocketryv1.Code_CODE_UNAVAILABLE, fault: k, msg: msg}
}

// ctxRefusal is the refusal of a call whose context ended while fault k
// held it.
func ctxRefusal(ctx context.Context, k faultKind) *refusal {
	st := status.FromContextError(ctx.Err())
	return &refusal{code: rocketryv1.Code_CODE_UNAVAILABLE, grpc: st.Code(), fault: k, msg: "broker: " + st.Message()}
}
