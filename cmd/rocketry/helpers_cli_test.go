package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestCleanError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("producer: send failed: %w", status.Error(codes.DeadlineExceeded, "producer: attempt timeout exceeded")),
			"send failed: DeadlineExceeded: attempt timeout exceeded"},
		{errors.New("broker: Start: listen tcp: bad\nsecond line"), "Start: listen tcp: bad"},
		{errors.New("plain"), "plain"},
	} {
		assert.Equal(t, tc.want, cleanError(tc.err), "cleanError(%q)", tc.err)
	}
}

func TestFitLine(t *testing.T) {
	assert.Equal(t, "long one", fitLine(8, "long one", "short"))
	assert.Equal(t, "short", fitLine(7, "long one", "short"))
	assert.Equal(t, "sho", fitLine(3, "long one", "short"))
	assert.Equal(t, "", fitLine(-1, "long one", "short"))
	assert.Equal(t, "·ab", fitLine(3, "·abcd"), "runes, not bytes")
}

func TestPace(t *testing.T) {
	assert.Equal(t, "", pace(0, 100, time.Second), "nothing done yet")
	assert.Equal(t, "50 msg/s · ETA 1s", pace(50, 100, time.Second))
	assert.Equal(t, "50 msg/s", pace(50, -1, time.Second), "unknown total: no ETA")
	assert.Equal(t, "1,000 msg/s", pace(1000, 1000, time.Second), "done: no ETA")
}

// TestReadLines: lines end with \n or \r\n, the last may have no end, a
// line over the limit is reported by number and dropped, and a read error
// ends the input after the lines before it.
func TestReadLines(t *testing.T) {
	collect := func(in string, limit int) []string {
		var got []string
		for l := range readLines(context.Background(), strings.NewReader(in), limit) {
			switch {
			case l.over:
				got = append(got, fmt.Sprintf("%d:over", l.n))
			default:
				got = append(got, fmt.Sprintf("%d:%s", l.n, l.body))
			}
		}
		return got
	}
	assert.Equal(t, []string{"1:a", "2:bb", "3:", "4:c"}, collect("a\nbb\r\n\nc", 4))
	assert.Equal(t, []string{"1:a", "2:over", "3:ccc"}, collect("a\nbbbbbb\nccc\n", 4))
	assert.Equal(t, []string{"1:abcd", "2:over"}, collect("abcd\r\nabcde\r\n", 4), "the limit counts the body, not the line end")
	big := strings.Repeat("x", 200<<10) // over the reader's buffer
	assert.Equal(t, []string{"1:over", "2:y"}, collect(big+"\ny", 100<<10))

	var got []line
	for l := range readLines(context.Background(), iotest.TimeoutReader(strings.NewReader("a\nb\n")), 10) {
		got = append(got, l)
	}
	if assert.NotEmpty(t, got) {
		assert.Error(t, got[len(got)-1].err, "the read error is the last line")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	lines := readLines(ctx, strings.NewReader("a\nb\n"), 10)
	for range lines { // ends: the reader stops at ctx's end
	}
}

func TestProduceExitCode(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sum   produceSummary
		why   error
		input error
		want  int
	}{
		{"all stored", produceSummary{Sent: 3, Stored: 3}, nil, errInputEnded, 0},
		{"spooled, run to the end", produceSummary{Sent: 3, Stored: 2, Failed: 1, Spooled: 1, Error: "x"}, nil, errInputEnded, 1},
		{"spooled, --timeout", produceSummary{Sent: 3, Stored: 2, Failed: 1, Spooled: 1, Error: "x"}, errTimedOut, context.Canceled, 0},
		{"lost, --timeout", produceSummary{Sent: 3, Stored: 2, Failed: 1}, errTimedOut, context.Canceled, 1},
		{"signal", produceSummary{Sent: 3, Stored: 3}, errInterrupted, context.Canceled, exitInterrupted},
		{"long line", produceSummary{Sent: 3, Stored: 3, Skipped: 1}, nil, errInputEnded, 1},
		{"stdin failed", produceSummary{Sent: 3, Stored: 3}, nil, errors.New("stdin line 4: EIO"), 1},
	} {
		assert.Equal(t, tc.want, tc.sum.exitCode(tc.why, tc.input), tc.name)
	}
}

// TestStopper: the timeout stops a run with errTimedOut and starts the
// grace period; a signal after it marks the run interrupted (exit 130)
// and keeps the first cause for the summary.
func TestStopper(t *testing.T) {
	leakCheck(t)
	var stderr syncBuffer
	s := watchStop("test", time.Millisecond, &stderr)
	var notes syncBuffer
	signalled := make(chan struct{})
	s.onStop(func(why error) {
		fmt.Fprintln(&notes, why)
		if errors.Is(why, errInterrupted) {
			close(signalled)
		}
	})
	grace, cancel := s.graceContext(time.Millisecond)
	defer cancel()
	<-s.ctx.Done()
	<-grace.Done()
	assert.ErrorIs(t, s.why(), errTimedOut)
	assert.False(t, s.interrupted())

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT)) // caught: the stopper is watching
	select {
	case <-signalled:
	case <-time.After(10 * time.Second):
		t.Fatal("SIGINT not seen in 10 s")
	}
	assert.True(t, s.interrupted())
	s.stop()
	assert.ErrorIs(t, s.why(), errTimedOut, "the first cause stays")
	assert.Equal(t, errTimedOut.Error()+"\n"+errInterrupted.Error()+"\n", notes.String())

	// Without a stop, the grace context never ends on its own.
	s = watchStop("test", 0, &stderr)
	grace, cancel = s.graceContext(time.Nanosecond)
	select {
	case <-grace.Done():
		t.Fatal("the grace context ended with no stop")
	case <-time.After(5 * time.Millisecond): // a nanosecond's grace, 5 million times over
	}
	cancel()
	s.stop()
}
