package main

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

func ms(d time.Duration) float64 { return roundTo(float64(d)/float64(time.Millisecond), 3) }

func roundTo(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

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

// fmtCount writes n with thousands separators: 20,000.
func fmtCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
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

// plural writes n and the noun's form for it: "1 re-send", "2 re-sends".
func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmtCount(n) + " " + many
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
