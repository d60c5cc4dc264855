package main

import (
	"fmt"
	"strings"
	"time"
)

// The demo's live display is the shared one (progress.go) with this status
// line: what the producer is going through, by throttle reason.

// demoStatus is the line under the demo's bar, at most room runes.
func (r *demoRun) demoStatus(elapsed time.Duration, room int) string {
	k := r.counters
	th := k.throttledByReason()
	sent := k.done.Load() + k.inFlight.Load()
	backoff := time.Duration(k.lastBackoff.Load()).Round(time.Millisecond)
	var now []string
	if r.backlogOn.Load() {
		now = append(now, "BACKLOG")
	}
	if r.storageOn.Load() {
		now = append(now, "STORAGE_LOAD")
	}
	if len(now) == 0 {
		now = append(now, "none")
	}
	p := pace(k.done.Load(), int64(r.c.messages), elapsed)
	if p != "" {
		p = " · " + p
	}
	long := fmt.Sprintf("  sent %s · stored %s · throttled BACKLOG %s, STORAGE_LOAD %s (now: %s) · retrying %d, backoff %v · dead-lettered %d%s",
		fmtCount(sent), fmtCount(k.stored.Load()), fmtCount(th["BACKLOG"]), fmtCount(th["STORAGE_LOAD"]), strings.Join(now, ", "),
		k.retryingNow(), backoff, k.deadLettered.Load(), p)
	code := throttleCode(r.c.wireProtocol().String())
	short := fmt.Sprintf("  sent %s · stored %s · %s BACKLOG %s, STORAGE_LOAD %s · retrying %d @%v · dead-lettered %d%s",
		fmtCount(sent), fmtCount(k.stored.Load()), code, fmtCount(th["BACKLOG"]), fmtCount(th["STORAGE_LOAD"]),
		k.retryingNow(), backoff, k.deadLettered.Load(), p)
	narrow := fmt.Sprintf("  sent %s stored %s | %s BL %s SL %s | retry %d @%v | DL %d",
		fmtCount(sent), fmtCount(k.stored.Load()), code, fmtCount(th["BACKLOG"]), fmtCount(th["STORAGE_LOAD"]),
		k.retryingNow(), backoff, k.deadLettered.Load())
	return fitLine(room, long, short, narrow)
}
