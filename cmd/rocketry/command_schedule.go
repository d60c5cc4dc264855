package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
)

const (
	defaultConnectionRetries = 10
	maxConnectionRetries     = 1_000_000
	// A table longer than tableLimit rows shows its first tableHead and
	// last tableTail rows unless --retries asks for a number.
	tableLimit, tableHead, tableTail = 200, 100, 10
)

const scheduleUsage = `usage: rocketry schedule (--connection-backoff [--retries N] | --policy FILE.json | --preset NAME) [flags]

Prints the retries of a schedule: their number, phase, delay (the wait before
the retry, counted from the start of the attempt before it) and elapsed time.
Retries, not attempts: retry 1 is the second attempt.

sources (give exactly one):
  --connection-backoff  gRPC's connection backoff (1 s, x1.6, +/-20%, at most 120 s)
  --policy FILE.json    an SNS delivery policy in its JSON form
  --preset NAME         SNS's policy for aws-managed or customer-managed endpoints

flags:
  --retries N   connection backoff: how many retries (default 10); policies:
                print only the first N (totals still count them all)
  --no-jitter   nominal delays, without jitter
  --seed S      seed of the jitter (default: random, printed in the table;
                ignored with --no-jitter)
  --json        {"total_retries", "total_seconds", "retries": [{"retry", "phase",
                "delay_seconds", "elapsed_seconds"}, ...]}
  --plot FILE.svg  also draw the delays, and SNS's four backoff functions, as SVG
`

// scheduleUsageError is a bad flag or policy: exit status 2, one line.
type scheduleUsageError struct{ msg string }

func (e *scheduleUsageError) Error() string { return e.msg }

func usageErrorf(format string, a ...any) error {
	return &scheduleUsageError{msg: fmt.Sprintf(format, a...)}
}

// scheduleOptions are the parsed flags.
type scheduleOptions struct {
	connection bool
	policyFile string
	preset     string
	retries    int
	retriesSet bool
	noJitter   bool
	seed       uint64
	seedSet    bool
	json       bool
	plot       string
}

func parseScheduleFlags(args []string) (*scheduleOptions, error) {
	var o scheduleOptions
	fs := flag.NewFlagSet("schedule", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.BoolVar(&o.connection, "connection-backoff", false, "")
	fs.StringVar(&o.policyFile, "policy", "", "")
	fs.StringVar(&o.preset, "preset", "", "")
	fs.IntVar(&o.retries, "retries", defaultConnectionRetries, "")
	fs.BoolVar(&o.noJitter, "no-jitter", false, "")
	fs.Uint64Var(&o.seed, "seed", 0, "")
	fs.BoolVar(&o.json, "json", false, "")
	fs.StringVar(&o.plot, "plot", "", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usageErrorf("%v", err)
	}
	if fs.NArg() > 0 {
		return nil, usageErrorf("unexpected argument %q; the source is a flag: --connection-backoff, --policy FILE or --preset NAME", fs.Arg(0))
	}
	sources := 0
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "retries":
			o.retriesSet = true
		case "seed":
			o.seedSet = true
		case "connection-backoff", "policy", "preset":
			sources++
		}
	})
	switch {
	case sources != 1 || (!o.connection && o.policyFile == "" && o.preset == ""):
		return nil, usageErrorf("give exactly one of --connection-backoff, --policy FILE.json, --preset %s", strings.Join(backoff.PresetNames, "|"))
	case o.retries < 0 || o.connection && o.retries > maxConnectionRetries:
		return nil, usageErrorf("--retries = %d: want 0..%d", o.retries, maxConnectionRetries)
	}
	if o.plot != "" {
		if err := checkPlotPath(o.plot); err != nil {
			return nil, err
		}
	}
	return &o, nil
}

func runSchedule(args []string, stdout, stderr io.Writer) int {
	o, err := parseScheduleFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, scheduleUsage)
		return 0
	}
	if err == nil {
		err = schedule(o, stdout, stderr)
	}
	var ue *scheduleUsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "rocketry schedule: %v\n", ue)
		return 2
	default:
		fmt.Fprintf(stderr, "rocketry schedule: %v\n", err)
		return 1
	}
}

// source is the chosen schedule and how to describe it.
type source struct {
	s     backoff.Schedule
	title string
	// all is how many retries to plan: -1 for a policy's whole length.
	all int
}

func loadSource(o *scheduleOptions) (*source, error) {
	switch {
	case o.connection:
		c, err := backoff.NewConnection(backoff.DefaultConfig)
		if err != nil {
			return nil, err
		}
		cfg := c.Config()
		return &source{s: c, all: o.retries, title: fmt.Sprintf(
			"gRPC connection backoff: %v x%g, jitter +/-%g%%, at most %v, at least %v per try",
			cfg.BaseDelay, cfg.Multiplier, cfg.Jitter*100, cfg.MaxDelay, cfg.MinConnectTimeout)}, nil
	case o.preset != "":
		p, err := backoff.Preset(o.preset)
		if err != nil {
			return nil, usageErrorf("--preset %q: want one of %s", o.preset, strings.Join(backoff.PresetNames, ", "))
		}
		return &source{s: p, all: -1, title: "SNS delivery policy " + p.Name() + ": " + describePolicy(p)}, nil
	default:
		data, err := os.ReadFile(o.policyFile)
		if err != nil {
			return nil, usageErrorf("--policy: %v", err)
		}
		p, err := backoff.ParsePolicy(data)
		if err != nil {
			return nil, usageErrorf("%s: %s", o.policyFile, strings.TrimPrefix(err.Error(), "backoff: "))
		}
		return &source{s: p, all: -1, title: "SNS delivery policy " + o.policyFile + ": " + describePolicy(p)}, nil
	}
}

func describePolicy(p *backoff.DeliveryPolicy) string {
	h := p.HealthyRetryPolicy()
	s := fmt.Sprintf("%d immediate, %d at %ds, %d %s from %ds to %ds, %d at %ds",
		h.NumNoDelayRetries, h.NumMinDelayRetries, h.MinDelayTarget, h.BackoffRetries(), h.BackoffFunction,
		h.MinDelayTarget, h.MaxDelayTarget, h.NumMaxDelayRetries, h.MaxDelayTarget)
	if p.Jitter() > 0 {
		s += fmt.Sprintf(", jitter +/-%g%%", p.Jitter()*100)
	}
	if r := p.MaxReceivesPerSecond(); r > 0 {
		s += fmt.Sprintf(", at most %g deliveries/s", r)
	}
	return s
}

// row is one printed retry, its delay rounded to the microsecond and its
// elapsed time the sum of the rounded delays, so the columns add up.
type row struct {
	retry          int
	phase          backoff.Phase
	delay, elapsed time.Duration
}

func schedule(o *scheduleOptions, stdout, stderr io.Writer) error {
	src, err := loadSource(o)
	if err != nil {
		return err
	}
	var r backoff.Rand
	seed := o.seed
	if !o.seedSet {
		seed = rand.Uint64()
	}
	if !o.noJitter {
		r = rand.New(rand.NewPCG(seed, 0))
	}
	steps := backoff.Plan(src.s, src.all, r)
	rows := make([]row, len(steps))
	var elapsed time.Duration
	for i, s := range steps {
		d := s.Delay.Round(time.Microsecond)
		elapsed += d
		rows[i] = row{retry: s.Retry, phase: s.Phase, delay: d, elapsed: elapsed}
	}
	shown := rows
	if o.retriesSet && !o.connection && o.retries < len(rows) {
		shown = rows[:o.retries]
	}
	if o.plot != "" {
		if err := writePlotFile(o.plot, src, shown); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "rocketry schedule: wrote %s\n", o.plot)
	}
	w := bufio.NewWriter(stdout)
	if o.json {
		writeScheduleJSON(w, len(rows), elapsed, shown)
	} else {
		jit := "no jitter"
		if r != nil {
			jit = fmt.Sprintf("jitter seed %d (--seed %d repeats it)", seed, seed)
		}
		fmt.Fprintf(w, "%s\n%s\n\n", src.title, jit)
		writeScheduleTable(w, shown, !o.retriesSet)
		fmt.Fprintf(w, "\n%s retries (attempts = retries + 1), %s in all\n", commas(len(rows)), fmtDuration(elapsed))
	}
	return w.Flush()
}

func writeScheduleJSON(w *bufio.Writer, total int, elapsed time.Duration, rows []row) {
	fmt.Fprintf(w, `{"total_retries": %d, "total_seconds": %s, "retries": [`, total, secs(elapsed))
	// Built with strconv, not fmt: the aws-managed preset has 100,015 rows.
	buf := make([]byte, 0, 128)
	for i, r := range rows {
		buf = buf[:0]
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, "\n  {\"retry\": "...)
		buf = strconv.AppendInt(buf, int64(r.retry), 10)
		buf = append(buf, `, "phase": "`...)
		buf = append(buf, r.phase.String()...)
		buf = append(buf, `", "delay_seconds": `...)
		buf = appendSecs(buf, r.delay)
		buf = append(buf, `, "elapsed_seconds": `...)
		buf = appendSecs(buf, r.elapsed)
		buf = append(buf, '}')
		w.Write(buf)
	}
	if len(rows) > 0 {
		w.WriteByte('\n')
	}
	w.WriteString("]}\n")
}

func writeScheduleTable(w *bufio.Writer, rows []row, elide bool) {
	fmt.Fprintf(w, "%7s  %-12s  %12s  %16s\n", "retry", "phase", "delay", "elapsed")
	line := func(r row) {
		fmt.Fprintf(w, "%7d  %-12s  %12s  %16s\n", r.retry, r.phase, fmtDuration(r.delay), fmtDuration(r.elapsed))
	}
	if !elide || len(rows) <= tableLimit {
		for _, r := range rows {
			line(r)
		}
		return
	}
	for _, r := range rows[:tableHead] {
		line(r)
	}
	fmt.Fprintf(w, "%7s  (%s retries not shown: --retries N prints the first N, --json prints all)\n",
		"...", commas(len(rows)-tableHead-tableTail))
	for _, r := range rows[len(rows)-tableTail:] {
		line(r)
	}
}

// secs prints a duration as seconds: 2.56, not 2.5600000000000005.
func secs(d time.Duration) string { return string(appendSecs(nil, d)) }

func appendSecs(b []byte, d time.Duration) []byte {
	return strconv.AppendFloat(b, float64(d.Round(time.Microsecond))/1e9, 'f', -1, 64)
}

// fmtDuration prints d rounded to the millisecond, with days when long:
// "1.6s", "1m49.951s", "23d3h33m20s".
func fmtDuration(d time.Duration) string {
	d = d.Round(time.Millisecond)
	if d < 24*time.Hour {
		return d.String()
	}
	days := d / (24 * time.Hour)
	return fmt.Sprintf("%dd%s", days, (d - days*24*time.Hour).String())
}

// commas prints n with thousands separators: 100,015.
func commas(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
