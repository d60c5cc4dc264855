package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/producer"
)

// demoSummary is what the demo found: printed as a table, or with --json as
// one JSON object.
type demoSummary struct {
	// Sent counts the messages handed to the producer; NotSent those the
	// run never got to, stopped by --timeout or a signal (Stopped says
	// which). Only the sent ones can be stored, dead-lettered or lost.
	Sent      int    `json:"sent"`
	SentSync  int    `json:"sent_sync"`
	SentAsync int    `json:"sent_async"`
	NotSent   int    `json:"not_sent"`
	Stopped   string `json:"stopped,omitempty"`
	// Stored counts the sent IDs in the broker's log after the sends (each
	// once), before any replay of the spool.
	Stored int `json:"stored"`
	// DeadLettered counts the sent IDs in the dead-letter spool after the
	// sends; DeadLetteredAlsoStored those of them the broker had stored
	// anyway (an attempt whose answer was lost).
	DeadLettered           int `json:"dead_lettered"`
	DeadLetteredAlsoStored int `json:"dead_lettered_also_stored"`
	// Lost counts the sent IDs neither stored nor spooled.
	Lost int `json:"lost"`
	// DuplicatesStored counts IDs the broker's log holds more than once, at
	// the end (after the replay): what it stored twice. Over
	// apache.rocketmq.v2 the broker answers as the Apache proxy, without
	// deduplication by ID, so a message sent again after an unknown outcome
	// whose attempt was stored is stored again, as in production.
	DuplicatesStored int `json:"duplicates_stored"`
	// Copies is the broker's own count of the messages of the topic stored
	// although their ID was stored before, at the end (TopicStats.Copies).
	Copies int64 `json:"copies"`
	// UnknownOutcomes counts the attempts whose outcome the producer could
	// not know (retried, or the last of a failed send; the replay's
	// included): the most copies the broker may hold.
	UnknownOutcomes int64 `json:"unknown_outcomes"`
	// DuplicatesRefused counts sends the broker answered as already stored
	// (a retry of a message whose earlier attempt was stored; rocketry.v1
	// only, which deduplicates).
	DuplicatesRefused int64 `json:"duplicates_refused"`

	Attempts                  int64            `json:"attempts"`
	AttemptsPerMessage        float64          `json:"attempts_per_message"`
	MostAttempts              int64            `json:"most_attempts_for_one_message"`
	Throttled                 map[string]int64 `json:"throttled"`
	ThrottlePeriods           map[string]int64 `json:"throttle_periods"`
	RetriesAfterThrottle      int64            `json:"retries_after_throttle"`
	RetriesAfterFailure       int64            `json:"retries_after_failure"`
	RetriesAfterFailureByCode map[string]int64 `json:"retries_after_failure_by_code"`
	RetriesAfterFailureByKind map[string]int64 `json:"retries_after_failure_by_kind"`
	Faults                    map[string]int64 `json:"faults"`
	LatencyMS                 demoLatency      `json:"latency_ms"`

	// FIFO is the check of the message groups' stored order (--fifo-groups).
	FIFO *demoFIFO `json:"fifo,omitempty"`

	Replay            *demoReplay `json:"replay,omitempty"`
	StoredAfterReplay int         `json:"stored_after_replay"`
	// SpoolLeft counts the messages still dead-lettered at the end; the
	// spool is removed with the demo's in-process broker.
	SpoolLeft int `json:"spool_left,omitempty"`

	SendSeconds    float64        `json:"send_seconds"`
	ElapsedSeconds float64        `json:"elapsed_seconds"`
	Elapsed        time.Duration  `json:"-"`
	Timeline       []demoEvent    `json:"timeline"`
	SendErrors     map[string]int `json:"send_errors,omitempty"`
	Problems       []string       `json:"problems,omitempty"`
	Config         demoConfigJSON `json:"config"`
	OK             bool           `json:"ok"`
}

type demoLatency struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

type demoReplay struct {
	Read   int `json:"read"`
	Stored int `json:"stored"`
	Failed int `json:"failed"`
}

// demoConfigJSON is the configuration as the JSON summary reports it.
type demoConfigJSON struct {
	Protocol         string  `json:"protocol"`
	Pacing           bool    `json:"pacing"`
	Messages         int     `json:"messages"`
	SyncWorkers      int     `json:"sync_workers"`
	MaxInFlight      int     `json:"max_in_flight"`
	MaxAttempts      int     `json:"max_attempts"`
	AttemptTimeoutMS float64 `json:"attempt_timeout_ms"`
	TimeScale        float64 `json:"time_scale"`
	ThrottleBackoff  string  `json:"throttle_backoff"`
	FailureBackoff   string  `json:"failure_backoff"`
	Queues           int     `json:"queues"`
	MaxBacklog       int64   `json:"max_backlog"`
	ColdReadDistance int64   `json:"cold_read_distance"`
	MaxStorageLoad   float64 `json:"max_storage_load"`
	InternalRate     float64 `json:"internal_rate"`
	RestartAt        float64 `json:"restart_at"`
	ConsumeRate      float64 `json:"consume_rate"`
	ResetAt          float64 `json:"reset_at"`
	RereadRate       float64 `json:"reread_rate"`
	Seed             uint64  `json:"seed"`
}

// demoFIFO is what the demo found of its message groups in the broker's
// log, before any replay: Sent messages handed to the producer in Groups
// groups, Stored of them in the order they were sent, OutOfOrder stored
// after a later message of their group, and Copies stored again next to
// their first store.
type demoFIFO struct {
	Groups     int `json:"groups"`
	Sent       int `json:"sent"`
	Stored     int `json:"stored_in_order"`
	OutOfOrder int `json:"out_of_order"`
	Copies     int `json:"copies"`
}

// ok is the demo's verdict: nothing lost, no more copies than the
// unknown outcomes the producer met (none where it met none; over
// rocketry.v1, which deduplicates, none at all in practice), and every
// message group stored in the order it was sent.
func (s *demoSummary) ok() bool {
	return s.Lost == 0 && s.Copies <= s.UnknownOutcomes && (s.FIFO == nil || s.FIFO.OutOfOrder == 0)
}

// verify checks the broker's log and the spool against what was sent, and
// fills a summary with the counts.
func (r *demoRun) verify() *demoSummary {
	c := r.c
	k := r.counters
	s := &demoSummary{Config: c.json()}
	for i, ok := range r.accepted {
		switch {
		case !ok:
			s.NotSent++
		case i < c.asyncCount():
			s.SentAsync++
		default:
			s.SentSync++
		}
	}
	s.Sent = s.SentAsync + s.SentSync
	stored := r.storedCounts()
	spooled := map[string]bool{}
	err := r.store.Scan(func(d *producer.DeadLetter, err error) error {
		if err == nil {
			spooled[d.Message.ID] = true
		}
		return err
	})
	if err != nil {
		s.Problems = append(s.Problems, "reading the dead-letter store: "+shortError(err))
	}
	for i := range c.messages {
		id := demoID(i)
		n := stored[id]
		if !r.accepted[i] {
			continue
		}
		switch {
		case n > 0 && spooled[id]:
			s.Stored++
			s.DeadLettered++
			s.DeadLetteredAlsoStored++
		case n > 0:
			s.Stored++
		case spooled[id]:
			s.DeadLettered++
		default:
			s.Lost++
		}
		if n > 1 {
			s.DuplicatesStored++
		}
	}
	s.StoredAfterReplay = s.Stored

	s.Attempts = k.attempts.Load()
	s.AttemptsPerMessage = roundTo(float64(s.Attempts)/float64(max(s.Sent, 1)), 2)
	s.MostAttempts = k.maxAttemptsOfOne.Load()
	s.Throttled = k.throttledByReason()
	s.RetriesAfterThrottle = k.retryThrottled.Load()
	s.RetriesAfterFailure = k.retryFailure.Load()
	s.RetriesAfterFailureByCode = k.failuresByCode()
	s.RetriesAfterFailureByKind = k.failuresByKind()
	p50, p99, top := k.latencyQuantiles()
	s.LatencyMS = demoLatency{P50: ms(p50), P99: ms(p99), Max: ms(top)}

	st := r.b.Stats()
	s.DuplicatesRefused = st.GetDuplicates()
	s.Copies = topicCopies(st, demoTopic)
	s.UnknownOutcomes = k.unknownOutcomes()
	s.Faults = map[string]int64{}
	for kind, n := range st.GetFaults() {
		if n > 0 {
			s.Faults[kind] = n
		}
	}
	s.ThrottlePeriods = map[string]int64{"BACKLOG": r.backlogPeriods.Load(), "STORAGE_LOAD": r.storagePeriods.Load()}

	k.mu.Lock()
	if len(k.errs) > 0 {
		s.SendErrors = map[string]int{}
		for e, n := range k.errs {
			s.SendErrors[e] = n
		}
	}
	k.mu.Unlock()
	return s
}

func (s *demoSummary) writeJSON(w io.Writer) error {
	s.OK = s.ok()
	s.ElapsedSeconds = roundTo(s.ElapsedSeconds, 3)
	s.SendSeconds = roundTo(s.SendSeconds, 3)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

func (s *demoSummary) writeText(w io.Writer) {
	s.OK = s.ok()
	fmt.Fprintln(w)
	var rows [][3]string
	row := func(label, value, note string) { rows = append(rows, [3]string{label, value, note}) }
	row("messages sent", fmtCount(int64(s.Sent)), fmt.Sprintf("%s with Send, %s with SendAsync", fmtCount(int64(s.SentSync)), fmtCount(int64(s.SentAsync))))
	if s.NotSent > 0 {
		row("never sent", fmtCount(int64(s.NotSent)), "not handed to the producer: "+s.Stopped)
	}
	row("stored", fmtCount(int64(s.Stored)), "IDs in the broker's log, each counted once")
	dl := "kept in the dead-letter spool"
	if s.Stopped != "" {
		dl = "in the run's spool, not replayed: the run was stopped"
	}
	if s.Replay != nil {
		dl = fmt.Sprintf("replayed: %d stored, %d failed", s.Replay.Stored, s.Replay.Failed)
	}
	if s.DeadLetteredAlsoStored > 0 {
		dl += fmt.Sprintf("; %d stored before (answer lost)", s.DeadLetteredAlsoStored)
	}
	row("dead-lettered", fmtCount(int64(s.DeadLettered)), dl)
	row("lost", fmtCount(int64(s.Lost)), "neither stored nor spooled")
	row("stored twice", fmtCount(int64(s.DuplicatesStored)), s.copiesNote())
	if f := s.FIFO; f != nil {
		note := fmt.Sprintf("%s of %s in %d groups stored in send order, %d out of order", fmtCount(int64(f.Stored)), fmtCount(int64(f.Sent)), f.Groups, f.OutOfOrder)
		if f.Copies > 0 {
			note += fmt.Sprintf(", %s next to the first", plural(int64(f.Copies), "copy", "copies"))
		}
		verdict := "held"
		if f.OutOfOrder > 0 {
			verdict = "BROKEN"
		}
		row("FIFO order", verdict, note)
	}
	row("attempts per message", strconv.FormatFloat(s.AttemptsPerMessage, 'f', 2, 64), fmt.Sprintf("%s attempts, at most %d for one", fmtCount(s.Attempts), s.MostAttempts))
	reasons := make([]string, 0, len(s.Throttled))
	for r := range s.Throttled {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		note := ""
		if n, ok := s.ThrottlePeriods[r]; ok {
			note = "started and lifted " + times(n)
		}
		row("throttled ("+throttleCode(s.Config.Protocol)+") "+r, fmtCount(s.Throttled[r]), note)
	}
	row("retries after throttling", fmtCount(s.RetriesAfterThrottle), "after the scaled connection backoff")
	row("retries after failures", fmtCount(s.RetriesAfterFailure), s.failureNote())
	row("latency p50", fmtMS(s.LatencyMS.P50), "from the call to its outcome")
	row("latency p99", fmtMS(s.LatencyMS.P99), "")
	row("latency max", fmtMS(s.LatencyMS.Max), "")
	row("elapsed", fmt.Sprintf("%.1fs", s.ElapsedSeconds), fmt.Sprintf("sending took %.1fs", s.SendSeconds))
	var lw, vw int
	for _, r := range rows {
		lw, vw = max(lw, len(r[0])), max(vw, len(r[1]))
	}
	for _, r := range rows {
		fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("  %-*s  %*s  %s", lw, r[0], vw, r[1], r[2]), " "))
	}

	if len(s.Timeline) > 0 {
		fmt.Fprintln(w)
		for _, e := range s.Timeline {
			fmt.Fprintf(w, "  at %5.1fs  %s\n", e.AtSeconds, e.What)
		}
	}
	if len(s.SendErrors) > 0 {
		fmt.Fprintln(w, "\n  sends that ended with an error (spooled where it says so):")
		errs := make([]string, 0, len(s.SendErrors))
		for e := range s.SendErrors {
			errs = append(errs, e)
		}
		sort.Slice(errs, func(i, j int) bool { return s.SendErrors[errs[i]] > s.SendErrors[errs[j]] })
		for i, e := range errs {
			if i == 5 {
				fmt.Fprintf(w, "  %6s  (%d more kinds)\n", "", len(errs)-i)
				break
			}
			fmt.Fprintf(w, "  %6d  %s\n", s.SendErrors[e], e)
		}
	}
	if s.SpoolLeft > 0 {
		why := "the replay did not store them"
		if s.Replay == nil {
			why = "not replayed"
		}
		fmt.Fprintf(w, "\n  %s still dead-lettered at the end (%s); the spool went with the demo's in-process broker\n",
			plural(int64(s.SpoolLeft), "message", "messages"), why)
	}
	for _, p := range s.Problems {
		fmt.Fprintf(w, "\n  problem: %s\n", p)
	}
	fmt.Fprintln(w)
	if s.OK {
		stopped := ""
		if s.Stopped != "" {
			stopped = fmt.Sprintf(" of the %s sent (%s: %s never sent)", fmtCount(int64(s.Sent)), s.Stopped, fmtCount(int64(s.NotSent)))
		}
		twice := "nothing stored twice"
		if s.Copies > 0 {
			twice = fmt.Sprintf("%s stored, no more than the %s the producer met", plural(s.Copies, "copy", "copies"), plural(s.UnknownOutcomes, "unknown outcome", "unknown outcomes"))
		}
		fmt.Fprintf(w, "OK: nothing lost, %s%s\n", twice, stopped)
	} else {
		fifo := ""
		if s.FIFO != nil && s.FIFO.OutOfOrder > 0 {
			fifo = fmt.Sprintf(", %d group messages out of order", s.FIFO.OutOfOrder)
		}
		fmt.Fprintf(w, "FAILED: %d lost, %d copies stored after %d unknown outcomes%s\n", s.Lost, s.Copies, s.UnknownOutcomes, fifo)
	}
}

// copiesNote says what the stored-twice count is against: the broker's
// copies, the unknown outcomes the producer met, and the re-sends the
// broker refused as duplicates (rocketry.v1).
func (s *demoSummary) copiesNote() string {
	note := fmt.Sprintf("%s by the broker's count, after %s", plural(s.Copies, "copy", "copies"), plural(s.UnknownOutcomes, "unknown outcome", "unknown outcomes"))
	if s.DuplicatesRefused > 0 {
		note += "; " + plural(s.DuplicatesRefused, "re-send", "re-sends") + " of a stored ID refused"
	}
	return note
}

// topicCopies is the broker's count of copies in topic, from its stats.
func topicCopies(st *rocketryv1.GetStatsResponse, topic string) int64 {
	for _, t := range st.GetTopics() {
		if t.GetTopic() == topic {
			return t.GetCopies()
		}
	}
	return 0
}

// failureNote says what the failed attempts answered and what that told
// of their messages (the kinds that occurred): "INTERNAL 612, UNAVAILABLE
// 40; 612 known not stored, 40 outcome unknown".
func (s *demoSummary) failureNote() string {
	if len(s.RetriesAfterFailureByCode) == 0 {
		return "no failed attempt"
	}
	var kinds []string
	if n := s.RetriesAfterFailureByKind[producer.FailedNotStored.String()]; n > 0 {
		kinds = append(kinds, fmtCount(n)+" known not stored")
	}
	if n := s.RetriesAfterFailureByKind[producer.FailedUnknown.String()]; n > 0 {
		kinds = append(kinds, fmtCount(n)+" outcome unknown")
	}
	return joinCounts(s.RetriesAfterFailureByCode) + "; " + strings.Join(kinds, ", ")
}

// writeConfig prints the configuration the demo runs with, in lines that
// fit 100 columns.
func (r *demoRun) writeConfig(w io.Writer) {
	c := r.c
	tc := c.throttleConfig()
	fmt.Fprintf(w, "rocketry demo: %s messages to topic %q\n", fmtCount(int64(c.messages)), demoTopic)
	line := func(k, format string, args ...any) { fmt.Fprintf(w, "  %-13s %s\n", k, fmt.Sprintf(format, args...)) }
	line("broker", "in process at %s, %d queues", r.b.Addr(), c.queues)
	if c.wireProtocol() == producer.RocketMQ5 {
		line("", "no deduplication by ID, as a RocketMQ 5 proxy: a message sent again is stored again")
	}
	if c.maxBacklog > 0 {
		line("", "BACKLOG above %s unconsumed, lifted at %s", fmtCount(c.maxBacklog), fmtCount(c.maxBacklog*8/10))
	}
	if c.maxStorageLoad > 0 {
		line("", "STORAGE_LOAD above %s cold reads/s (> %s behind head)", fmtCount(int64(c.maxStorageLoad)), fmtCount(c.coldReadDistance))
	}
	restart := "no restart"
	if c.restartAt > 0 {
		restart = fmt.Sprintf("a restart at %g%%", c.restartAt*100)
	}
	line("faults", "%g%% of sends answered INTERNAL (nothing stored), %s", c.internalRate*100, restart)
	line("consumers", "group %q drains %s msg/s", steadyGroup, fmtCount(int64(c.consumeRate)))
	if c.resetAt > 0 {
		line("", "group %q reset to offset 0 at %g%%, re-reads at %s msg/s", backtrackGroup, c.resetAt*100, fmtCount(int64(c.rereadRate)))
	} else {
		line("", "group %q follows at up to %s msg/s, never reset", backtrackGroup, fmtCount(int64(c.rereadRate)))
	}
	line("producer", "speaks %s to the broker (--protocol %s)", c.wireProtocol(), c.protocol)
	if c.pacing {
		line("", "paces the broker when it throttles without a hint (--pacing)")
	} else {
		line("", "no pacing (--pacing=false)")
	}
	line("", "%s by Send on %d goroutines", fmtCount(int64(c.messages-c.asyncCount())), c.syncWorkers)
	line("", "%s by SendAsync, %d in flight", fmtCount(int64(c.asyncCount())), c.maxInFlight)
	line("", "at most %s a message (the first + %s)", plural(int64(c.maxAttempts), "attempt", "attempts"), plural(int64(c.maxAttempts-1), "retry", "retries"))
	line("", "attempt timeout %v", c.attemptLimit)
	line("after "+throttleCode(c.wireProtocol().String()), "gRPC connection backoff, times x%g:", c.timeScale)
	line("", "%v, x%g, jitter %g, max %v, min connect %v", tc.BaseDelay, tc.Multiplier, tc.Jitter, tc.MaxDelay, tc.MinConnectTimeout)
	if c.failure == "backoff" {
		line("after failure", "the same scaled connection backoff")
	} else {
		line("after failure", "retry at once (backoff.Immediate, the default)")
	}
	if c.replay {
		line("dead letters", "a temporary spool, replayed at the end, removed with the broker")
	} else {
		line("dead letters", "a temporary spool, counted at the end, removed with the broker")
	}
	line("seed", "%d", c.seed)
}

func (c *demoConfig) json() demoConfigJSON {
	tc := c.throttleConfig()
	return demoConfigJSON{
		Protocol:         c.wireProtocol().String(),
		Pacing:           c.pacing,
		Messages:         c.messages,
		SyncWorkers:      c.syncWorkers,
		MaxInFlight:      c.maxInFlight,
		MaxAttempts:      c.maxAttempts,
		AttemptTimeoutMS: ms(c.attemptLimit),
		TimeScale:        c.timeScale,
		ThrottleBackoff: fmt.Sprintf("%v x%g jitter %g max %v min-connect %v",
			tc.BaseDelay, tc.Multiplier, tc.Jitter, tc.MaxDelay, tc.MinConnectTimeout),
		FailureBackoff:   c.failure,
		Queues:           c.queues,
		MaxBacklog:       c.maxBacklog,
		ColdReadDistance: c.coldReadDistance,
		MaxStorageLoad:   c.maxStorageLoad,
		InternalRate:     c.internalRate,
		RestartAt:        c.restartAt,
		ConsumeRate:      c.consumeRate,
		ResetAt:          c.resetAt,
		RereadRate:       c.rereadRate,
		Seed:             c.seed,
	}
}

func ms(d time.Duration) float64 { return roundTo(float64(d)/float64(time.Millisecond), 3) }

// joinCounts writes a map of counts sorted by key: "a 1, b 2".
func joinCounts(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+" "+fmtCount(m[k]))
	}
	return strings.Join(parts, ", ")
}

// fmtMS writes milliseconds readably: 0.4ms, 12ms, 1.3s.
func fmtMS(v float64) string {
	switch {
	case v >= 1000:
		return strconv.FormatFloat(v/1000, 'f', 1, 64) + "s"
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 0, 64) + "ms"
	default:
		return strconv.FormatFloat(v, 'f', 1, 64) + "ms"
	}
}

// times writes a count of occurrences: "never", "once", "3 times".
func times(n int64) string {
	switch n {
	case 0:
		return "never"
	case 1:
		return "once"
	}
	return fmtCount(n) + " times"
}
