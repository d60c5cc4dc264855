package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// demoProgress is the live display on stderr: a progress bar of the
// messages whose send has ended, described by what the producer is going
// through. It shows nothing when stderr is not a terminal.
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
		progressbar.OptionSetWidth(20),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionShowDescriptionAtLineEnd(),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetRenderBlankState(true),
	)
	return p
}

// run redraws the display until stop is closed.
func (p *demoProgress) run(stop <-chan struct{}) {
	if p.bar == nil {
		return
	}
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
	k := p.r.counters
	done := k.done.Load()
	p.bar.Describe(p.describe())
	// Stay short of the end: reaching it finishes (and clears) the bar,
	// which finish does once the run is over.
	_ = p.bar.Set64(min(done, p.bar.GetMax64()-1))
}

// describe is the status next to the bar, fitted to the terminal's width
// (a line that wraps could not be redrawn in place).
func (p *demoProgress) describe() string {
	k := p.r.counters
	th := k.throttledByReason()
	sent := k.done.Load() + k.inFlight.Load()
	backoff := time.Duration(k.lastBackoff.Load()).Round(time.Millisecond)
	now := ""
	if p.r.backlogOn.Load() {
		now += " BACKLOG"
	}
	if p.r.storageOn.Load() {
		now += " STORAGE_LOAD"
	}
	if now == "" {
		now = " none"
	}
	long := fmt.Sprintf("sent %s stored %s | throttled: BACKLOG %s STORAGE_LOAD %s (now:%s) | retrying %d, backoff %v | dead-lettered %d",
		fmtCount(sent), fmtCount(k.stored.Load()), fmtCount(th["BACKLOG"]), fmtCount(th["STORAGE_LOAD"]), now,
		k.retryingNow(), backoff, k.deadLettered.Load())
	short := fmt.Sprintf("stored %s | 530 BL %s SL %s | retrying %d @%v | DL %d",
		fmtCount(k.stored.Load()), fmtCount(th["BACKLOG"]), fmtCount(th["STORAGE_LOAD"]),
		k.retryingNow(), backoff, k.deadLettered.Load())
	// The bar, its count and the elapsed time take about 60 columns.
	room := p.width - 60 - len(fmtCount(int64(p.bar.GetMax())))*2
	switch {
	case len(long) <= room:
		return long
	case len(short) <= room:
		return short
	case room > 3:
		return short[:room-3] + "..."
	default:
		return ""
	}
}

// finish ends the display: the bar is completed and cleared, so that the
// summary starts on a clean line.
func (p *demoProgress) finish() {
	if p.bar == nil {
		return
	}
	_ = p.bar.Finish()
	_ = p.bar.Clear()
}
