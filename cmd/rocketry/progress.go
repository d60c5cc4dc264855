package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// liveProgress is the live display of produce, replay and demo on stderr:
// a bar of the messages whose send has ended (a spinner when the total is
// unknown, as for stdin), and under it one status line. It shows nothing
// when stderr is not a terminal, or with --quiet; finish clears it, so that
// the summary starts on a clean line.
type liveProgress struct {
	bar    *progressbar.ProgressBar                     // nil: no display
	width  int                                          // the terminal's columns
	total  int64                                        // -1: unknown
	done   func() int64                                 // messages whose send has ended
	status func(elapsed time.Duration, room int) string // the line under the bar, at most room runes
	start  time.Time

	note atomic.Pointer[string] // shown instead of the status: "stopping: ..."
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// progressTick is how often the display is redrawn.
const progressTick = 100 * time.Millisecond

// terminalWidth returns the columns of w when it is a terminal.
func terminalWidth(w io.Writer) (int, bool) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0, false
	}
	if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
		return cols, true
	}
	return 80, true
}

// startProgress starts the display on stderr (when it is a terminal and
// quiet is false) and returns it; total < 0 means unknown. done and status
// are called on the display's goroutine: they only read atomics.
func startProgress(stderr io.Writer, quiet bool, desc string, total int64, done func() int64, status func(elapsed time.Duration, room int) string) *liveProgress {
	p := &liveProgress{total: total, done: done, status: status, start: time.Now(), stop: make(chan struct{})}
	width, ok := terminalWidth(stderr)
	if quiet || !ok {
		return p
	}
	p.width = width
	p.bar = progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(stderr),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionSetMaxDetailRow(1),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSpinnerType(14),
	)
	p.wg.Add(1)
	go p.run()
	return p
}

func (p *liveProgress) run() {
	defer p.wg.Done()
	p.update()
	t := time.NewTicker(progressTick)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.update()
		}
	}
}

func (p *liveProgress) update() {
	n := p.done()
	if p.total > 0 {
		// Stay short of the end: reaching it finishes the bar, which
		// finish does once the run is over.
		n = min(n, p.total-1)
	}
	_ = p.bar.Set64(n)
	room := p.width - 1
	line := p.status(time.Since(p.start), room)
	if note := p.note.Load(); note != nil {
		line = fitLine(room, "  "+*note)
	}
	_ = p.bar.AddDetail(line)
}

// setNote replaces the status line with note (on a terminal), or says it
// on w as one line (elsewhere, unless quiet).
func (p *liveProgress) setNote(w io.Writer, quiet bool, prefix, note string) {
	if p.bar != nil {
		p.note.Store(&note)
		return
	}
	if !quiet {
		fmt.Fprintf(w, "%s: %s\n", prefix, note)
	}
}

// finish stops the display and clears it, bar and status line; it may be
// called more than once, and from a signal's exit hook.
func (p *liveProgress) finish() {
	if p.bar == nil {
		return
	}
	p.once.Do(func() {
		close(p.stop)
		p.wg.Wait()
		_ = p.bar.AddDetail("")
		_ = p.bar.Finish()
		_ = p.bar.Clear()
	})
}

// pace says how fast the sends end and, with a known total, when the last
// will: "1,234 msg/s · ETA 12s". Before the first end it says nothing.
func pace(done, total int64, elapsed time.Duration) string {
	if done <= 0 || elapsed <= 0 {
		return ""
	}
	rate := float64(done) / elapsed.Seconds()
	s := fmtCount(int64(rate+0.5)) + " msg/s"
	if total > 0 && done < total {
		eta := time.Duration(float64(total-done) / rate * float64(time.Second))
		s += " · ETA " + eta.Round(time.Second).String()
	}
	return s
}

// fitLine returns the first of the variants, longest first, that fits in
// room runes, else the last one cut to room (a line that wraps could not
// be redrawn in place).
func fitLine(room int, variants ...string) string {
	for _, s := range variants {
		if utf8.RuneCountInString(s) <= room {
			return s
		}
	}
	last := []rune(variants[len(variants)-1])
	return string(last[:max(min(room, len(last)), 0)])
}

// sendStatus is the status line of produce and replay: what the sends of
// k went through, and their pace.
func sendStatus(k *sendCounters, total int64, elapsed time.Duration, room int) string {
	th := int64(0)
	for _, n := range k.throttledByReason() {
		th += n
	}
	sent := k.done.Load() + k.inFlight.Load()
	retries := k.retryThrottled.Load() + k.retryFailure.Load()
	p := pace(k.done.Load(), total, elapsed)
	if p != "" {
		p = " · " + p
	}
	long := fmt.Sprintf("  sent %s · stored %s · throttled %s · retries %s · failed %s%s",
		fmtCount(sent), fmtCount(k.stored.Load()), fmtCount(th), fmtCount(retries), fmtCount(k.failed.Load()), p)
	narrow := fmt.Sprintf("  sent %s stored %s thr %s retry %s fail %s%s",
		fmtCount(sent), fmtCount(k.stored.Load()), fmtCount(th), fmtCount(retries), fmtCount(k.failed.Load()), p)
	return fitLine(room, long, narrow)
}
