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

func init() {
	register(command{name: "spool", summary: "look inside a dead-letter store (ls, show, stats) or import an old spool file", run: runSpool})
}

const spoolUsage = `usage: rocketry spool ls [--json] FILE          one line per record: id, topic, attempts, pinned endpoint, age, last error
       rocketry spool show [--json] FILE ID     one record in full, its body included
       rocketry spool stats [--json] FILE       counts: records, bytes, topics, codes, pinned, oldest
       rocketry spool import [--json] OLD FILE  put the records of an old spool file (before the store) into the store FILE

FILE is opened read-only (import: for writing) and nothing is sent; a store
held by a running producer is refused after a second.`

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
		MaybeStoredAt: d.MaybeStoredAt, SpooledAt: d.SpooledAt,
	}
	if !d.SpooledAt.IsZero() {
		r.AgeSeconds = roundTo(now.Sub(d.SpooledAt).Seconds(), 3)
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
	Pinned       int            `json:"pinned"` // records with an endpoint where they may be stored
	Corrupt      int            `json:"corrupt"`
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
	want := map[string]int{"ls": 1, "show": 2, "stats": 1, "import": 2}[sub]
	if want == 0 {
		fmt.Fprintf(stderr, "rocketry spool: unknown subcommand %q (ls, show, stats, import)\n", sub)
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
		var bad []string
		err := s.Scan(func(d *producer.DeadLetter, err error) error {
			if err != nil {
				bad = append(bad, err.Error())
				return nil
			}
			recs = append(recs, toSpoolRecord(d, now, false))
			return nil
		})
		if err != nil {
			return err
		}
		if jsonOut {
			return out(struct {
				Records []spoolRecord `json:"records"`
				Corrupt []string      `json:"corrupt,omitempty"`
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
			fmt.Fprintf(tw, "unreadable: %s\n", b)
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
			if !d.SpooledAt.IsZero() && (st.OldestAt.IsZero() || d.SpooledAt.Before(st.OldestAt)) {
				st.OldestAt = d.SpooledAt
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
		fmt.Fprintf(stdout, "%s: %d records, %d body bytes, %d pinned to an endpoint, %d unreadable\n", st.Store, st.Records, st.BodyBytes, st.Pinned, st.Corrupt)
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
