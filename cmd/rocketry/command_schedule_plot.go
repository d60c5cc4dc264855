package main

import (
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
)

// The plot is a hand-written SVG: two panels, the chosen schedule's delay
// per retry and SNS's four backoff functions side by side. Only .svg is
// written; for a PNG, convert it (rsvg-convert -o plot.png plot.svg).

const (
	plotW, plotH   = 1200, 540
	panelW, panelH = 500, 340 // the plotting area of each panel
	panelTop       = 120
	maxPlotRetries = 300 // the left panel shows at most this many retries
)

var (
	phaseColors = map[backoff.Phase]string{
		backoff.PhaseImmediate:   "#7f7f7f",
		backoff.PhasePreBackoff:  "#2ca02c",
		backoff.PhaseBackoff:     "#1f77b4",
		backoff.PhasePostBackoff: "#d62728",
	}
	functionStyles = map[backoff.BackoffFunction]struct{ color, dash string }{
		backoff.Arithmetic:  {"#ff7f0e", ""},
		backoff.Exponential: {"#1f77b4", "8 4"},
		backoff.Geometric:   {"#2ca02c", "2 3"},
		backoff.Linear:      {"#9467bd", "12 4 3 4"},
	}
)

func checkPlotPath(path string) error {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg":
		return nil
	case ".png":
		return usageErrorf("--plot %s: only SVG is written; write %s and convert it (rsvg-convert -o %s %s)",
			path, strings.TrimSuffix(path, filepath.Ext(path))+".svg", path, strings.TrimSuffix(path, filepath.Ext(path))+".svg")
	}
	return usageErrorf("--plot %s: want a file name ending in .svg", path)
}

func writePlotFile(path string, src *source, rows []row) error {
	svg := plotSVG(src, rows)
	if err := os.WriteFile(path, []byte(svg), 0o644); err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	return nil
}

// plotSVG draws the plot. It is pure, so tests can check it.
func plotSVG(src *source, rows []row) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Arial, Helvetica, sans-serif">`+"\n", plotW, plotH, plotW, plotH)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	// The title is "what: details"; the details go on a second line.
	head, detail, _ := strings.Cut(src.title, ": ")
	text(&b, plotW/2, 28, 18, "middle", "bold", clipText(head, 100))
	text(&b, plotW/2, 50, 13, "middle", "normal", clipText(detail, 150))
	delayPanel(&b, 80, panelTop, src, rows)
	functionsPanel(&b, 660, panelTop, src)
	b.WriteString("</svg>\n")
	return b.String()
}

func delayPanel(b *strings.Builder, x0, y0 int, src *source, rows []row) {
	total := len(rows)
	if len(rows) > maxPlotRetries {
		rows = rows[:maxPlotRetries]
	}
	title := "Delay before each retry"
	if len(rows) < total {
		title = fmt.Sprintf("Delay before each retry (first %d of %s)", len(rows), commas(total))
	}
	text(b, x0+panelW/2, y0-38, 15, "middle", "bold", title)
	ymax := 1.0
	for _, r := range rows {
		ymax = math.Max(ymax, r.delay.Seconds())
	}
	xs := axes(b, x0, y0, float64(max(len(rows), 1)), ymax, "retry number", "delay (seconds)", 1)
	bw := math.Max(1, math.Min(24, float64(panelW)/float64(max(len(rows), 1))*0.7))
	seen := map[backoff.Phase]bool{}
	for _, r := range rows {
		px := xs.x(float64(r.retry))
		py := xs.y(r.delay.Seconds())
		c := phaseColors[r.phase]
		seen[r.phase] = true
		if r.delay == 0 {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px, py, c)
			continue
		}
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n",
			px-bw/2, py, bw, xs.y(0)-py, c)
	}
	// Legend: the phases present, in a row above the panel.
	lx, ly := x0, y0-22
	for _, ph := range []backoff.Phase{backoff.PhaseImmediate, backoff.PhasePreBackoff, backoff.PhaseBackoff, backoff.PhasePostBackoff} {
		if !seen[ph] {
			continue
		}
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="14" height="14" fill="%s"/>`+"\n", lx, ly, phaseColors[ph])
		text(b, lx+20, ly+12, 13, "start", "normal", ph.String())
		lx += 125
	}
	if len(rows) == 0 {
		text(b, x0+panelW/2, y0+panelH/2, 14, "middle", "normal", "no retries")
	}
}

// functionsPanel draws SNS's four backoff functions over the chosen
// policy's backoff phase, or over the SNS example's (1 s to 60 s, 10
// retries) when the schedule has no such phase worth drawing.
func functionsPanel(b *strings.Builder, x0, y0 int, src *source) {
	lo, hi, n := 1, 60, 10
	if p, ok := src.s.(*backoff.DeliveryPolicy); ok {
		h := p.HealthyRetryPolicy()
		if h.BackoffRetries() >= 3 && h.MinDelayTarget < h.MaxDelayTarget {
			lo, hi, n = h.MinDelayTarget, h.MaxDelayTarget, min(h.BackoffRetries(), 100)
		}
	}
	text(b, x0+panelW/2, y0-38, 15, "middle", "bold",
		fmt.Sprintf("SNS backoff functions: %d retries from %ds to %ds", n, lo, hi))
	xs := axes(b, x0, y0, float64(n), float64(hi), "retry number in the backoff phase", "delay (seconds)", 1)
	minD, maxD := time.Duration(lo)*time.Second, time.Duration(hi)*time.Second
	lx, ly := x0, y0-22
	for _, f := range backoff.BackoffFunctions {
		st := functionStyles[f]
		var pts []string
		for k := 1; k <= n; k++ {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xs.x(float64(k)), xs.y(f.At(k, n, minD, maxD).Seconds())))
		}
		dash := ""
		if st.dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, st.dash)
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2.5"%s/>`+"\n", strings.Join(pts, " "), st.color, dash)
		if n <= 40 {
			for _, p := range pts {
				x, y, _ := strings.Cut(p, ",")
				fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", x, y, st.color)
			}
		}
		// Legend, in a row above the panel.
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.5"%s/>`+"\n",
			lx, ly+7, lx+32, ly+7, st.color, dash)
		text(b, lx+38, ly+12, 13, "start", "normal", f.String())
		lx += 125
	}
}

// scale maps data to panel coordinates.
type scale struct {
	x0, y0       int
	xmax, ymax   float64
	xmin, xrange float64
}

func (s scale) x(v float64) float64 {
	return float64(s.x0) + (v-s.xmin)/s.xrange*float64(panelW)
}

func (s scale) y(v float64) float64 { return float64(s.y0+panelH) - v/s.ymax*float64(panelH) }

// axes draws the frame, grid, ticks and labels of a panel whose x axis
// runs from xmin to xmax and y axis from 0 to ymax (rounded up to a tick).
func axes(b *strings.Builder, x0, y0 int, xmax, ymax float64, xlabel, ylabel string, xmin float64) scale {
	ystep := niceStep(ymax / 5)
	ymax = math.Ceil(ymax/ystep-1e-9) * ystep
	xpad := 0.5 // half a retry of room at each end
	s := scale{x0: x0, y0: y0, xmax: xmax, ymax: ymax, xmin: xmin - xpad, xrange: xmax - xmin + 2*xpad}
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", x0, y0, panelW, panelH)
	for v := 0.0; v <= ymax+ystep/2; v += ystep {
		py := s.y(v)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", x0, py, x0+panelW, py)
		text(b, x0-8, int(py)+5, 12, "end", "normal", trimFloat(v))
	}
	xstep := math.Max(1, niceStep((xmax-xmin)/8))
	// Ticks at xmin and at the multiples of xstep after it: 1, 50, 100, ...
	ticks := []float64{xmin}
	for v := math.Floor(xmin/xstep)*xstep + xstep; v <= xmax+1e-9; v += xstep {
		if v-xmin >= xstep/2 {
			ticks = append(ticks, v)
		}
	}
	for _, v := range ticks {
		px := s.x(v)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333"/>`+"\n", px, y0+panelH, px, y0+panelH+5)
		text(b, int(px), y0+panelH+20, 12, "middle", "normal", trimFloat(v))
	}
	text(b, x0+panelW/2, y0+panelH+45, 13, "middle", "normal", xlabel)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="13" text-anchor="middle" transform="rotate(-90 %d %d)">%s</text>`+"\n",
		x0-50, y0+panelH/2, x0-50, y0+panelH/2, html.EscapeString(ylabel))
	return s
}

// niceStep rounds v up to 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
	if !(v > 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string {
	return strings.TrimSuffix(fmt.Sprintf("%.6g", math.Round(v*1e6)/1e6), ".0")
}

func text(b *strings.Builder, x, y, size int, anchor, weight, s string) {
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="%d" text-anchor="%s" font-weight="%s" fill="#111">%s</text>`+"\n",
		x, y, size, anchor, weight, html.EscapeString(s))
}

func clipText(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
