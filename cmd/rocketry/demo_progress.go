package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// demoProgress is the live display on stderr: a progress bar of the
// messages whose send has ended, and under it one line of what the producer
// is going through. It shows nothing when stderr is not a terminal.
type demoProgress struct {
	bar   *progressbar.ProgressBar // nil: no display
	r     *demoRun
	width int // the terminal's columns
}

// progressTick is how often the display is redrawn.
const progressTick = 100 * time.Millisecond

func newDemoProgress(stderr io.Writer, total int, r *demoRun) *demoProgress {
	p := &demoProgress{r: r}
	f, ok := stderr.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return p
	}
	p.width = 80
	if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 0 {
		p.width = w
	}
	p.bar = progressbar.NewOptions(total,
		progressbar.OptionSetWriter(stderr),
		progressbar.OptionSetDescription("sending"),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionSetMaxDetailRow(1),
		progressbar.OptionClearOnFinish(),
	)
	return p
}

// run redraws the display until stop is closed.
func (p *demoProgress) run(stop <-chan struct{}) {
	if p.bar == nil {
		return
	}
	p.update()
	t := time.NewTicker(progressTick)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			p.update()
		}
	}
}

func (p *demoProgress) update() {
	// Stay short of the end: reaching it finishes the bar, which finish
	// does once the run is over.
	_ = p.bar.Set64(min(p.r.counters.done.Load(), p.bar.GetMax64()-1))
	_ = p.bar.AddDetail(p.status())
}

// status is the line under the bar, cut to the terminal's width (a line
// that wraps could not be redrawn in place).
func (p *demoProgress) status() string {
	k := p.r.counters
	th := k.throttledByReason()
	sent := k.done.Load() + k.inFlight.Load()
	backoff := time.Duration(k.lastBackoff.Load()).Round(time.Millisecond)
	var now []string
	if p.r.backlogOn.Load() {
		now = append(now, "BACKLOG")
	}
	if p.r.storageOn.Load() {
		now = append(now, "STORAGE_LOAD")
	}
	if len(now) == 0 {
		now = append(now, "none")
	}
	long := fmt.Sprintf("  sent %s · stored %s · throttled BACKLOG %s, STORAGE_LOAD %s (now: %s) · retrying %d, backoff %v · dead-lettered %d",
		fmtCount(sent), fmtCount(k.stored.Load()), fmtCount(th["BACKLOG"]), fmtCount(th["STORAGE_LOAD"]), strings.Join(now, ", "),
		k.retryingNow(), backoff, k.deadLettered.Load())
	code := throttleCode(p.r.c.wireProtocol().String())
	short := fmt.Sprintf("  sent %s · stored %s · %s BACKLOG %s, STORAGE_LOAD %s · retrying %d @%v · dead-lettered %d",
		fmtCount(sent), fmtCount(k.stored.Load()), code, fmtCount(th["BACKLOG"]), fmtCount(th["STORAGE_LOAD"]),
		k.retryingNow(), backoff, k.deadLettered.Load())
	narrow := fmt.Sprintf("  sent %s stored %s | %s BL %s SL %s | retry %d @%v | DL %d",
		fmtCount(sent), fmtCount(k.stored.Load()), code, fmtCount(th["BACKLOG"]), fmtCount(th["STORAGE_LOAD"]),
		k.retryingNow(), backoff, k.deadLettered.Load())
	room := p.width - 1
	for _, s := range []string{long, short, narrow} {
		if utf8.RuneCountInString(s) <= room {
			return s
		}
	}
	return string([]rune(narrow)[:max(room, 0)])
}

// finish ends the display cleanly: the bar is completed and cleared, and so
// is the status line under it, so that the summary starts on a clean line.
func (p *demoProgress) finish() {
	if p.bar == nil {
		return
	}
	_ = p.bar.AddDetail("")
	_ = p.bar.Finish()
	_ = p.bar.Clear()
}
