package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// TestServeHintless runs the server in this process on pipes: a bucket of
// 1/s with a burst of 2 stores two messages and refuses the third with
// RESOURCE_EXHAUSTED and only the ErrorDetail (no RetryInfo); "stats"
// counts the three; closing its stdin stops it.
func TestServeHintless(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- ServeHintless(context.Background(), "127.0.0.1:0", 1, 2, inR, outW)
		outW.Close()
	}()
	out := bufio.NewReader(outR)
	line, err := out.ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		t.Fatalf("first line = %q, %v; want \"listening ADDR\"", line, err)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := rocketryv1.NewMessagingServiceClient(cc)
	send := func(id string) error {
		_, err := client.SendMessage(context.Background(), &rocketryv1.SendMessageRequest{Messages: []*rocketryv1.Message{{MessageId: id, Topic: "t"}}})
		return err
	}
	for _, id := range []string{"a", "b"} {
		if err := send(id); err != nil {
			t.Fatalf("SendMessage(%s) = %v; want stored (burst 2)", id, err)
		}
	}
	err = send("c")
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("SendMessage(c) = %v; want RESOURCE_EXHAUSTED", err)
	}
	details := st.Details()
	if len(details) != 1 {
		t.Fatalf("SendMessage(c) details = %v; want only the ErrorDetail", details)
	}
	d, ok := details[0].(*rocketryv1.ErrorDetail)
	if !ok || d.GetCode() != rocketryv1.Code_CODE_TOO_MANY_REQUESTS || d.GetReason() != rocketryv1.ThrottleReason_THROTTLE_REASON_SEND_RATE {
		t.Errorf("SendMessage(c) detail = %v; want ErrorDetail 530 SEND_RATE", details[0])
	}
	if _, isHint := details[0].(*errdetails.RetryInfo); isHint {
		t.Errorf("SendMessage(c) carries a RetryInfo; want none")
	}

	if _, err := io.WriteString(inW, "stats\n"); err != nil {
		t.Fatal(err)
	}
	line, err = out.ReadString('\n')
	var got ServerStats
	if err != nil || json.Unmarshal([]byte(line), &got) != nil {
		t.Fatalf("stats answer = %q, %v; want a JSON line", line, err)
	}
	if want := (ServerStats{Requests: 3, Stored: 2, Refused: 1}); got != want {
		t.Errorf("stats = %+v; want %+v", got, want)
	}
	inW.Close()
	go io.Copy(io.Discard, out)
	if err := <-done; err != nil {
		t.Errorf("ServeHintless after stdin closed = %v; want nil", err)
	}
}

func TestServeHintlessBadSettings(t *testing.T) {
	for _, tc := range []struct {
		rate  float64
		burst int
	}{{0, 1}, {1, 0}} {
		if err := ServeHintless(context.Background(), "127.0.0.1:0", tc.rate, tc.burst, strings.NewReader(""), io.Discard); err == nil {
			t.Errorf("ServeHintless(rate %v, burst %d) = nil; want an error", tc.rate, tc.burst)
		}
	}
}

func TestSummarizeHintless(t *testing.T) {
	rs := []*HintlessResult{
		{Contender: "x", CapacityRatio: 0.3, Failed: 5},
		{Contender: "x", CapacityRatio: 0.2, Failed: 1},
		{Contender: "x", CapacityRatio: 0.25, Failed: 3},
	}
	s := SummarizeHintless(rs)
	if want := (Spread{Median: 0.25, Min: 0.2, Max: 0.3}); s.CapacityRatio != want || s.Rounds != 3 {
		t.Errorf("SummarizeHintless(...).CapacityRatio = %+v, rounds %d; want %+v, 3", s.CapacityRatio, s.Rounds, want)
	}
	if got := s.CapacityRatio.format("%.1f", "%", func(v float64) float64 { return 100 * v }); got != "25.0% (20.0-30.0%)" {
		t.Errorf("format = %q; want %q", got, "25.0% (20.0-30.0%)")
	}
	if got := (Spread{Median: 4, Min: 4, Max: 4}).format("%.0f", "", func(v float64) float64 { return v }); got != "4" {
		t.Errorf("format of a single value = %q; want %q", got, "4")
	}
	if got := SummarizeHintless(rs[:2]).Failed.Median; got != 3 {
		t.Errorf("median of 5 and 1 = %v; want 3", got)
	}
}

func TestHintlessValidate(t *testing.T) {
	ok := DefaultHintless()
	ok.Server = []string{"x"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(defaults) = %v; want nil", err)
	}
	for name, mut := range map[string]func(*Hintless){
		"duration": func(h *Hintless) { h.Duration = 0 },
		"senders":  func(h *Hintless) { h.Senders = 0 },
		"rate":     func(h *Hintless) { h.Rate = 0 },
		"burst":    func(h *Hintless) { h.Burst = 0 },
		"attempts": func(h *Hintless) { h.MaxAttempts = 6 },
		"server":   func(h *Hintless) { h.Server = nil },
		"hot-cold senders": func(h *Hintless) {
			h.Shape, h.Senders = ShapeHotCold, 1
		},
		"hog": func(h *Hintless) { h.Hog = true },
	} {
		h := ok
		mut(&h)
		if err := h.Validate(); err == nil {
			t.Errorf("Validate with bad %s = nil; want an error", name)
		}
	}
}

// serveInProcess runs ServeSteps on pipes in this process, for the test's
// life: it returns the server's address and a func that reads its stats.
func serveInProcess(t *testing.T, perSecond float64, burst int, latency time.Duration) (string, func() ServerStats) {
	t.Helper()
	return serveShapeInProcess(t, ShapeBucket, perSecond, burst, latency)
}

// serveShapeInProcess is serveInProcess with the throttling of shape.
func serveShapeInProcess(t *testing.T, shape string, perSecond float64, burst int, latency time.Duration) (string, func() ServerStats) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- ServeSteps(context.Background(), "127.0.0.1:0", shape, perSecond, burst, nil, latency, inR, outW)
		outW.Close()
	}()
	out := bufio.NewReader(outR)
	line, err := out.ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	require.True(t, err == nil && ok, "first line = %q, %v; want \"listening ADDR\"", line, err)
	t.Cleanup(func() {
		inW.Close()
		require.NoError(t, <-done)
	})
	return addr, func() ServerStats {
		_, err := io.WriteString(inW, "stats\n")
		require.NoError(t, err)
		line, err := out.ReadString('\n')
		require.NoError(t, err)
		var st ServerStats
		require.NoError(t, json.Unmarshal([]byte(line), &st), "stats line %q", line)
		return st
	}
}

// TestServeLatency: every call takes the latency more, so a call whose
// deadline is a tenth of it ends DEADLINE_EXCEEDED, and one that waits is
// answered (no clock read).
func TestServeLatency(t *testing.T) {
	addr, _ := serveInProcess(t, 1000, 10, 300*time.Millisecond)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer cc.Close()
	client := rocketryv1.NewMessagingServiceClient(cc)
	req := &rocketryv1.SendMessageRequest{Messages: []*rocketryv1.Message{{MessageId: "a", Topic: "t"}}}
	short, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err = client.SendMessage(short, req)
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "a call with a tenth of the latency: %v", err)
	_, err = client.SendMessage(context.Background(), req)
	assert.NoError(t, err, "a call that waits")
}

// TestAsyncSender: the rocketry-async contender sends with SendAsync and
// returns its callback's outcome: 20 senders at once against a server that
// takes 50 ms a call, every message stored once (the server counts them).
func TestAsyncSender(t *testing.T) {
	addr, stats := serveInProcess(t, 1e6, 1000, 50*time.Millisecond)
	s, err := NewHintlessSender(RocketryAsync, addr, 5)
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Go(func() { errs[i] = s.Send(context.Background(), "m"+strconv.Itoa(i), []byte("x")) })
	}
	wg.Wait()
	require.NoError(t, s.Close())
	for i, err := range errs {
		assert.NoError(t, err, "send %d", i)
	}
	st := stats()
	assert.Equal(t, int64(len(errs)), st.Stored, "stored: %+v", st)
}
