package main

import (
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// svgTexts parses an SVG as XML and returns its text elements.
func svgTexts(t *testing.T, svg string) []string {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(svg))
	var texts []string
	inText := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			inText = tok.Name.Local == "text"
		case xml.CharData:
			if inText {
				texts = append(texts, string(tok))
			}
		case xml.EndElement:
			inText = false
		}
	}
	return texts
}

func TestSchedulePlot(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"--policy", "testdata/sns-example.json", "--no-jitter"},
			[]string{"SNS delivery policy testdata/sns-example.json", "Delay before each retry", "immediate", "pre-backoff",
				"backoff", "post-backoff", "SNS backoff functions: 10 retries from 1s to 60s"}},
		{[]string{"--preset", "aws-managed", "--seed", "7"},
			[]string{"SNS delivery policy aws-managed", "Delay before each retry (first 300 of 100,015)", "SNS backoff functions: 10 retries from 1s to 20s"}},
		{[]string{"--connection-backoff", "--retries", "20", "--seed", "7"},
			[]string{"gRPC connection backoff", "Delay before each retry", "SNS backoff functions: 10 retries from 1s to 60s"}},
		{[]string{"--connection-backoff", "--retries", "0"}, []string{"no retries"}},
	}
	for _, tt := range tests {
		path := filepath.Join(t.TempDir(), "plot.svg")
		args := append([]string{"schedule", "--plot", path}, tt.args...)
		code, _, errs := runCLI(t, args...)
		if code != 0 || !strings.Contains(errs, "wrote "+path) {
			t.Fatalf("rocketry %s = exit %d, stderr %q; want 0 and a note of the file", strings.Join(args, " "), code, errs)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		texts := strings.Join(svgTexts(t, string(data)), "\n")
		want := append([]string{"arithmetic", "exponential", "geometric", "linear", "retry number", "delay (seconds)"}, tt.want...)
		for _, w := range want {
			if !strings.Contains(texts, w) {
				t.Errorf("rocketry %s: the plot has no text %q; it has:\n%s", strings.Join(args, " "), w, texts)
			}
		}
		if n := strings.Count(string(data), "<polyline"); n != 4 {
			t.Errorf("rocketry %s: %d curves; want the 4 backoff functions", strings.Join(args, " "), n)
		}
	}
}

func TestNiceStep(t *testing.T) {
	for in, want := range map[float64]float64{0: 1, 0.3: 0.5, 1: 1, 1.1: 2, 12: 20, 24: 50, 120: 200, 600: 1000} {
		if got := niceStep(in); got != want {
			t.Errorf("niceStep(%v) = %v; want %v", in, got, want)
		}
	}
}
