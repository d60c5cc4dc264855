package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/rocketry-go/rocketry/producer"
	"github.com/rocketry-go/rocketry/producer/deadletter"
)

const spoolUsage = `usage: rocketry spool ls [--json] FILE          one line per record: id, topic, attempts, pinned endpoint, age, last error
       rocketry spool show [--json] FILE ID     one record in full, its body included
       rocketry spool stats [--json] FILE       counts: records, bytes, topics, codes, pinned, oldest
       rocketry spool import [--json] OLD FILE  put the records of an old spool file (before the store) into the store FILE
       rocketry spool check [--json] FILE       read every page and record: what is intact, what is damaged (exit 1 if any)
       rocketry spool salvage [--json] FILE NEW copy every intact record of FILE into the new store NEW, saying what it left out

FILE is opened read-only (import: for writing) and nothing is sent; a store
held by a running producer is refused after a second. A damaged store is
refused by ls, show, stats and replay; check says what is damaged, and
salvage copies what is not into a new store (FILE is left as it is).`

// spoolRecord is one record as ls and show print it.
type spoolRecord struct {
	ID            string            `json:"id"`
	Topic         string            `json:"topic"`
	Tag           string            `json:"tag,omitempty"`
	Keys          []string          `json:"keys,omitempty"`
	Properties    map[string]string `json:"properties,omitempty"`
	Transactional bool              `json:"transactional,omitempty"`
	BodyBytes     int               `json:"body_bytes"`
	Body          string            `json:"body,omitempty"`        // show: the body when it is UTF-8
	BodyBase64    []byte            `json:"body_base64,omitempty"` // show: the body when it is not
	Attempts      int               `json:"attempts"`
	Code          string            `json:"code"`
	Error         string            `json:"error"`
	MaybeStoredAt string            `json:"maybe_stored_at,omitempty"` // the pinned endpoint
	SpooledAt     time.Time         `json:"spooled_at,omitzero"`
	AgeSeconds    float64           `json:"age_seconds"`
}

func toSpoolRecord(d *producer.DeadLetter, now time.Time, withBody bool) spoolRecord {
	m := d.Message
	r := spoolRecord{
		ID: m.ID, Topic: m.Topic, Tag: m.Tag, Keys: m.Keys, Properties: m.Properties, Transactional: m.Transactional,
		BodyBytes: len(m.Body), Attempts: d.Attempts, Code: d.Code.String(), Error: d.Err,
		MaybeStoredAt: d.MaybeStoredAt, SpooledAt: d.DeadLetteredAt,
	}
	if !d.DeadLetteredAt.IsZero() {
		r.AgeSeconds = roundTo(now.Sub(d.DeadLetteredAt).Seconds(), 3)
	}
	if withBody {
		if utf8.Valid(m.Body) {
			r.Body = string(m.Body)
		} else {
			r.BodyBase64 = m.Body
		}
	}
	return r
}

// spoolStats is what stats prints.
type spoolStats struct {
	Store        string         `json:"store"`
	Records      int            `json:"records"`
	BodyBytes    int64          `json:"body_bytes"`
	Pinned       int            `json:"pinned"`  // records with an endpoint where they may be stored
	Corrupt      int            `json:"corrupt"` // damaged records: never sent, kept
	Topics       map[string]int `json:"topics"`
	Codes        map[string]int `json:"codes"`
	OldestAt     time.Time      `json:"oldest_at,omitzero"`
	OldestSecond float64        `json:"oldest_age_seconds"`
}

func runSpool(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stdout, spoolUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	sub := args[0]
	want := map[string]int{"ls": 1, "show": 2, "stats": 1, "import": 2, "check": 1, "salvage": 2}[sub]
	if want == 0 {
		fmt.Fprintf(stderr, "rocketry spool: unknown subcommand %q (ls, show, stats, import, check, salvage)\n", sub)
		return 2
	}
	fs := flag.NewFlagSet("spool "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	jsonOut := fs.Bool("json", false, "print JSON")
	var pos []string
	for rest := args[1:]; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprintln(stdout, spoolUsage)
				return 0
			}
			fmt.Fprintf(stderr, "rocketry spool %s: %s\n", sub, oneLine(err.Error()))
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(pos) != want {
		fmt.Fprintf(stderr, "rocketry spool %s: want %d argument(s), got %d; run \"rocketry spool -h\"\n", sub, want, len(pos))
		return 2
	}
	var err error
	switch sub {
	case "import":
		err = spoolImport(pos[0], pos[1], *jsonOut, stdout)
	case "check":
		err = spoolCheck(pos[0], *jsonOut, stdout)
	case "salvage":
		err = spoolSalvage(pos[0], pos[1], *jsonOut, stdout)
	default:
		err = spoolRead(sub, pos, *jsonOut, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rocketry spool %s: %s\n", sub, oneLine(err.Error()))
		return 1
	}
	return 0
}

// spoolRead runs ls, show or stats on the store pos[0], read-only.
func spoolRead(sub string, pos []string, jsonOut bool, stdout io.Writer) error {
	s, err := deadletter.Open(pos[0], deadletter.WithReadOnly())
	if err != nil {
		return err
	}
	defer s.Close()
	now := time.Now()
	out := func(v any) error {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	switch sub {
	case "show":
		d, err := s.Get(pos[1])
		if err != nil {
			return err
		}
		r := toSpoolRecord(d, now, true)
		if jsonOut {
			return out(r)
		}
		b, _ := json.MarshalIndent(r, "", "  ")
		_, err = fmt.Fprintln(stdout, string(b))
		return err
	case "ls":
		recs := []spoolRecord{}
		var bad []deadletter.DamagedRecord
		err := s.Scan(func(d *producer.DeadLetter, err error) error {
			var re *deadletter.RecordError
			if errors.As(err, &re) {
				bad = append(bad, deadletter.DamagedRecord{Key: re.Key, Error: re.Reason})
				return nil
			}
			if err != nil {
				return err
			}
			recs = append(recs, toSpoolRecord(d, now, false))
			return nil
		})
		if err != nil {
			return err
		}
		if jsonOut {
			return out(struct {
				Records []spoolRecord              `json:"records"`
				Damaged []deadletter.DamagedRecord `json:"damaged,omitempty"` // never sent, kept
			}{recs, bad})
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTOPIC\tATTEMPTS\tMAYBE STORED AT\tAGE\tLAST ERROR")
		for _, r := range recs {
			at := r.MaybeStoredAt
			if at == "" {
				at = "-"
			}
			age := time.Duration(r.AgeSeconds * float64(time.Second)).Round(time.Second)
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%v\t%s\n", r.ID, r.Topic, r.Attempts, at, age, shorten(r.Error, 80))
		}
		for _, b := range bad {
			fmt.Fprintf(tw, "%s\tDAMAGED (never sent, kept): %s\n", b.Key, shorten(b.Error, 100))
		}
		return tw.Flush()
	default: // stats
		st := spoolStats{Store: pos[0], Topics: map[string]int{}, Codes: map[string]int{}}
		err := s.Scan(func(d *producer.DeadLetter, err error) error {
			if err != nil {
				st.Corrupt++
				return nil
			}
			st.Records++
			st.BodyBytes += int64(len(d.Message.Body))
			st.Topics[d.Message.Topic]++
			st.Codes[d.Code.String()]++
			if d.MaybeStoredAt != "" {
				st.Pinned++
			}
			if !d.DeadLetteredAt.IsZero() && (st.OldestAt.IsZero() || d.DeadLetteredAt.Before(st.OldestAt)) {
				st.OldestAt = d.DeadLetteredAt
			}
			return nil
		})
		if err != nil {
			return err
		}
		if !st.OldestAt.IsZero() {
			st.OldestSecond = roundTo(now.Sub(st.OldestAt).Seconds(), 3)
		}
		if jsonOut {
			return out(st)
		}
		fmt.Fprintf(stdout, "%s: %d records, %d body bytes, %d pinned to an endpoint, %d damaged\n", st.Store, st.Records, st.BodyBytes, st.Pinned, st.Corrupt)
		if !st.OldestAt.IsZero() {
			fmt.Fprintf(stdout, "  oldest: %v ago\n", time.Duration(st.OldestSecond*float64(time.Second)).Round(time.Second))
		}
		fmt.Fprintf(stdout, "  topics: %s\n  codes: %s\n", counts(st.Topics), counts(st.Codes))
		return nil
	}
}

// spoolImport puts the records of the old spool file old into the store
// at path.
func spoolImport(old, path string, jsonOut bool, stdout io.Writer) error {
	s, err := deadletter.Open(path)
	if err != nil {
		return err
	}
	res, ierr := s.ImportSpool(old)
	if err := s.Close(); err != nil && ierr == nil {
		ierr = err
	}
	if jsonOut {
		b, _ := json.Marshal(struct {
			Imported int    `json:"imported"`
			Unread   int64  `json:"unread_bytes"`
			Error    string `json:"error,omitempty"`
		}{res.Imported, res.Unread, errText(ierr)})
		fmt.Fprintln(stdout, string(b))
	} else {
		fmt.Fprintf(stdout, "imported %d records of %s into %s; %d bytes not read\n", res.Imported, old, path, res.Unread)
	}
	return ierr
}

// errDamaged is spool check's error for a damaged store: exit 1, the
// report on stdout says what.
var errDamaged = errors.New("the store is damaged (see above); `rocketry spool salvage FILE NEW` copies its intact records into a new store")

// spoolCheck reads every page and record of the store at path, as bbolt's
// check does, and prints what is intact and what is damaged.
func spoolCheck(path string, jsonOut bool, stdout io.Writer) error {
	rep, err := deadletter.Check(path)
	if err != nil {
		return err
	}
	if jsonOut {
		b, _ := json.MarshalIndent(struct {
			Intact bool `json:"intact"`
			*deadletter.CheckReport
		}{rep.Intact(), rep}, "", "  ")
		fmt.Fprintln(stdout, string(b))
	} else {
		printReport(stdout, rep, "")
	}
	if !rep.Intact() {
		return fmt.Errorf("%s: %w", path, errDamaged)
	}
	return nil
}

// printReport prints a check report; copied, when not empty, says what
// salvage copied.
func printReport(w io.Writer, rep *deadletter.CheckReport, copied string) {
	state := "intact"
	if !rep.Intact() {
		state = "DAMAGED"
	}
	fmt.Fprintf(w, "%s: %s: %d records intact, %d damaged, %d pages of records lost; %d pages of %d bytes in use, transaction %d\n",
		rep.Path, state, rep.Records, len(rep.Damaged), rep.LostPages, rep.PagesInUse, rep.PageSize, rep.Txid)
	if copied != "" {
		fmt.Fprintln(w, "  "+copied)
	}
	if rep.Unchecked > 0 {
		fmt.Fprintf(w, "  %d of the intact records are of the format before checksums (read as before)\n", rep.Unchecked)
	}
	if rep.Delivered > 0 {
		fmt.Fprintf(w, "  %d of the intact records were delivered by a replay and came back (the delivered ledger lists them): a replay deletes them without sending, salvage leaves them out\n", rep.Delivered)
	}
	for _, d := range rep.Damaged {
		fmt.Fprintf(w, "  damaged record: key %q: %s\n", d.Key, shorten(d.Error, 120))
	}
	if rep.LostPages > 0 {
		fmt.Fprintf(w, "  %d pages of records could not be read: their records are not counted above\n", rep.LostPages)
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(w, "  problem: %s\n", shorten(p, 200))
	}
	if rep.MetaNote != "" {
		fmt.Fprintf(w, "  meta: %s\n", rep.MetaNote)
	}
}

// spoolSalvage copies every intact record of the store src into the new
// store dst, and says what it left out.
func spoolSalvage(src, dst string, jsonOut bool, stdout io.Writer) error {
	res, err := deadletter.Salvage(src, dst)
	if err != nil {
		return err
	}
	rep := res.Report
	if jsonOut {
		b, _ := json.MarshalIndent(struct {
			Copied int    `json:"copied"`
			Into   string `json:"into"`
			*deadletter.CheckReport
		}{res.Copied, dst, rep}, "", "  ")
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	left := fmt.Sprintf("left out: %d damaged records, %d pages of records lost, %d records already delivered", len(rep.Damaged), rep.LostPages, rep.Delivered)
	printReport(stdout, rep, fmt.Sprintf("salvaged into %s: copied %d records; %s", dst, res.Copied, left))
	return nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return oneLine(err.Error())
}

// counts prints a map of counts as "a 3, b 1", largest first.
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// shorten cuts s to n runes, marking the cut.
func shorten(s string, n int) string {
	s = oneLine(s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
