package producer

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// This file holds the attempt watchdog: how an attempt's timeout ends it.
//
// A context.WithDeadline per attempt is costly on gRPC's fast path: a
// timerCtx and a runtime timer on the client, a grpc-timeout header to
// encode, and on the server the header to parse and a context.WithTimeout
// of its own (+12 allocations per call, 12-18% of the time of a raw call on
// loopback). Instead, each attempt gets a plain cancelable context and is
// registered, with its deadline, with the watchdog of its Producer (or
// interceptor), which cancels it when the deadline passes.
//
// The watchdog keeps the attempts in flight in a min-heap by deadline and
// one reusable time.AfterFunc timer set to the earliest deadline, so an
// attempt is cancelled as precisely as a context deadline would end it (the
// runtime timer's latency, nothing coarser), and registering costs a lock,
// a heap push and no allocation once the free list holds a node. The
// timer's function runs on a goroutine of its own only while it cancels,
// so no goroutine waits between deadlines: with no attempt in flight the
// watchdog holds no goroutine at all (the interceptor has no Close), and at
// most one spurious wake-up follows the last attempt.
//
// An attempt the watchdog cancelled reads as a timed-out attempt
// (codes.DeadlineExceeded: a failure with an unknown outcome), exactly as
// when its context's deadline ended it; the caller's own context is still
// what decide checks to stop the send.

// errAttemptTimeout is the cause an attempt's context is cancelled with
// when its timeout passes, and the error the attempt then ends with.
var errAttemptTimeout = status.Error(codes.DeadlineExceeded, "producer: attempt timeout exceeded")

// maxFreeNodes bounds the nodes a watchdog keeps for reuse: beyond that many
// attempts in flight at once, the extra nodes are left to the collector.
const maxFreeNodes = 1024

// watchdog cancels the attempts in flight whose deadline has passed. The
// zero value is ready to use; it must not be copied once used.
type watchdog struct {
	mu    sync.Mutex
	heap  []*wdNode   // attempts in flight, a min-heap by deadline
	free  *wdNode     // nodes for reuse, linked by next
	nfree int         //
	timer *time.Timer // time.AfterFunc(w.fire); nil until the first attempt
	wake  time.Time   // when timer fires; zero: not set
}

// wdNode is one attempt in flight. The watchdog owns it: it is handed out
// by arm and taken back by disarm, and its fields are read and written
// under the watchdog's lock only.
type wdNode struct {
	deadline time.Time
	cancel   context.CancelCauseFunc
	index    int     // in heap, while armed
	fired    bool    // the watchdog cancelled the attempt
	next     *wdNode // free list
}

// arm registers an attempt that must end by deadline; cancel cancels its
// context. The attempt must call disarm when it ends, before cancel's
// context is reused or dropped.
func (w *watchdog) arm(deadline time.Time, cancel context.CancelCauseFunc) *wdNode {
	w.mu.Lock()
	n := w.free
	if n != nil {
		w.free, n.next = n.next, nil
		w.nfree--
	} else {
		n = &wdNode{}
	}
	n.deadline, n.cancel, n.fired = deadline, cancel, false
	w.push(n)
	if w.wake.IsZero() || deadline.Before(w.wake) {
		// The timer is not set, or set for later: set it for this one.
		w.wake = deadline
		if w.timer == nil {
			w.timer = time.AfterFunc(time.Until(deadline), w.fire)
		} else {
			w.timer.Reset(time.Until(deadline))
		}
	}
	w.mu.Unlock()
	return n
}

// disarm unregisters the attempt of n, which must not be used after; it
// says whether the watchdog cancelled the attempt (its timeout passed).
// The timer is left as it is: when it fires with no attempt due, it only
// sets itself for the next one, if any.
func (w *watchdog) disarm(n *wdNode) (fired bool) {
	w.mu.Lock()
	fired = n.fired
	if !fired {
		w.remove(n.index)
	}
	if len(w.heap) == 0 && cap(w.heap) > maxFreeNodes {
		w.heap = nil // after a burst: do not keep its capacity
	}
	n.cancel = nil
	if w.nfree < maxFreeNodes {
		n.next = w.free
		w.free = n
		w.nfree++
	}
	w.mu.Unlock()
	return fired
}

// fire is the timer's function: it cancels the attempts whose deadline has
// passed, then sets the timer for the next deadline. It cancels under the
// lock, so a node is never cancelled once disarm has taken it back (a
// later attempt may have it by then); cancelling a context runs no code of
// ours and takes no lock of ours.
func (w *watchdog) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for len(w.heap) > 0 && !now.Before(w.heap[0].deadline) {
		n := w.heap[0]
		w.remove(0)
		n.fired = true
		n.cancel(errAttemptTimeout)
	}
	if len(w.heap) == 0 {
		w.wake = time.Time{}
		return
	}
	w.wake = w.heap[0].deadline
	w.timer.Reset(w.wake.Sub(now))
}

// timedOut is the error an attempt that the watchdog cancelled ends with:
// errAttemptTimeout when err is the cancellation, else err (an answer that
// came as the timeout passed is kept).
func timedOut(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled {
		return errAttemptTimeout
	}
	return err
}

// The heap, by deadline; each node knows its index.

func (w *watchdog) push(n *wdNode) {
	n.index = len(w.heap)
	w.heap = append(w.heap, n)
	w.up(n.index)
}

func (w *watchdog) remove(i int) {
	last := len(w.heap) - 1
	if i != last {
		w.swap(i, last)
	}
	w.heap[last] = nil
	w.heap = w.heap[:last]
	if i != last {
		if !w.down(i) {
			w.up(i)
		}
	}
}

func (w *watchdog) less(i, j int) bool { return w.heap[i].deadline.Before(w.heap[j].deadline) }

func (w *watchdog) swap(i, j int) {
	w.heap[i], w.heap[j] = w.heap[j], w.heap[i]
	w.heap[i].index = i
	w.heap[j].index = j
}

func (w *watchdog) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !w.less(i, p) {
			return
		}
		w.swap(i, p)
		i = p
	}
}

// down moves node i down; it says whether it moved.
func (w *watchdog) down(i int) bool {
	start, n := i, len(w.heap)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && w.less(r, l) {
			m = r
		}
		if !w.less(m, i) {
			break
		}
		w.swap(i, m)
		i = m
	}
	return i > start
}
