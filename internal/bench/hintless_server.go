package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// The hintless server is a MessagingService that stores nothing but
// counts: a token bucket of Rate messages per second with a burst of
// Burst, and every refusal answered RESOURCE_EXHAUSTED with the one detail
// ErrorDetail{CODE_TOO_MANY_REQUESTS, THROTTLE_REASON_SEND_RATE}, never a
// google.rpc.RetryInfo. The bundled broker cannot play it: its send-rate
// bucket has a burst of one second's worth and its refusals carry a hint.
//
// It runs in its own process (ServeHintless, behind a hidden subcommand of
// the rocketry command), so that its CPU is not the contenders' and a
// contender's goroutines cannot slow its bucket. The two processes talk
// over the child's stdin and stdout, one line at a time:
//
//	child:  listening 127.0.0.1:PORT
//	parent: stats
//	child:  {"requests":N,"stored":N,"refused":N}
//	parent: start UNIXNANO
//	child:  (no answer: the capacity schedule, if any, counts from then)
//	parent: (closes stdin)
//	child:  (stops serving and exits)
//
// Closing stdin is also what happens when the parent dies, so the child
// never outlives it.

// ServerStats are the hintless server's counters since it started.
type ServerStats struct {
	// Requests is the SendMessage calls received: every attempt of every
	// contender.
	Requests int64 `json:"requests"`
	// Stored is the messages accepted.
	Stored int64 `json:"stored"`
	// Refused is the calls answered RESOURCE_EXHAUSTED.
	Refused int64 `json:"refused"`
	// HotRequests, HotStored and HotRefused are the same counts for the
	// calls to topic "hot" alone (ShapeHot, ShapeHotCold), among the
	// above.
	HotRequests int64 `json:"hot_requests,omitempty"`
	HotStored   int64 `json:"hot_stored,omitempty"`
	HotRefused  int64 `json:"hot_refused,omitempty"`
}

// hintlessServer is the service. Safe for concurrent use.
type hintlessServer struct {
	rocketryv1.UnimplementedMessagingServiceServer
	shape                     string // one of Shapes
	lim                       *rate.Limiter
	burst                     int
	msg                       string
	requests, stored, refused atomic.Int64
	hotRequests, hotStored    atomic.Int64 // topic "hot"'s, among the above
	hotRefused                atomic.Int64
	offset                    atomic.Int64
	queue                     sendQueue
	seen                      sync.Map      // ShapeOneInTen: message IDs refused once
	sched                     *rateSchedule // ShapeBucket's capacity schedule; nil: none
	latency                   time.Duration // each call waits half of it before the bucket decides, half after
}

func newHintlessServer(shape string, perSecond float64, burst int) *hintlessServer {
	s := &hintlessServer{
		shape: shape,
		lim:   rate.NewLimiter(rate.Limit(perSecond), burst),
		burst: burst,
		msg:   fmt.Sprintf("bench: send rate over %g messages/s (burst %d); nothing stored", perSecond, burst),
		queue: sendQueue{perSecond: perSecond},
	}
	switch shape {
	case ShapeHot:
		s.msg = "bench: topic " + hotTopic + " has too many unconsumed messages (BACKLOG); nothing stored"
	case ShapeOneInTen:
		s.msg = "bench: this message is refused once; nothing stored"
	case ShapeHotCold:
		s.msg = fmt.Sprintf("bench: topic %s: send rate over %g messages/s (burst %d); nothing stored", hotTopic, perSecond, burst)
	}
	return s
}

// refusal is the one answer to a throttled call: RESOURCE_EXHAUSTED and
// the ErrorDetail, nothing else.
func (s *hintlessServer) refusal() error {
	st, err := status.New(codes.ResourceExhausted, s.msg).WithDetails(&rocketryv1.ErrorDetail{
		Code:   rocketryv1.Code_CODE_TOO_MANY_REQUESTS,
		Reason: rocketryv1.ThrottleReason_THROTTLE_REASON_SEND_RATE,
	})
	if err != nil {
		return status.Error(codes.Internal, "bench: "+err.Error())
	}
	return st.Err()
}

func (s *hintlessServer) SendMessage(ctx context.Context, req *rocketryv1.SendMessageRequest) (*rocketryv1.SendMessageResponse, error) {
	s.requests.Add(1)
	n := len(req.GetMessages())
	if n == 0 {
		return nil, status.Error(codes.InvalidArgument, "bench: no messages")
	}
	hot := req.GetMessages()[0].GetTopic() == hotTopic
	if hot {
		s.hotRequests.Add(1)
	}
	if err := s.travel(ctx); err != nil {
		return nil, err
	}
	err := s.admit(ctx, req, n)
	if werr := s.travel(ctx); werr != nil {
		return nil, werr
	}
	if err != nil {
		s.refused.Add(1)
		if hot {
			s.hotRefused.Add(1)
		}
		return nil, err
	}
	s.stored.Add(int64(n))
	if hot {
		s.hotStored.Add(int64(n))
	}
	resp := &rocketryv1.SendMessageResponse{Results: make([]*rocketryv1.SendResult, n)}
	for i, m := range req.GetMessages() {
		resp.Results[i] = &rocketryv1.SendResult{MessageId: m.GetMessageId(), Offset: s.offset.Add(1) - 1}
	}
	return resp, nil
}

// travel is half of the round trip the server adds to a call: a
// request's way in, or its answer's way out.
func (s *hintlessServer) travel(ctx context.Context) error {
	if s.latency <= 0 {
		return nil
	}
	t := time.NewTimer(s.latency / 2)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

func (s *hintlessServer) stats() ServerStats {
	return ServerStats{Requests: s.requests.Load(), Stored: s.stored.Load(), Refused: s.refused.Load(),
		HotRequests: s.hotRequests.Load(), HotStored: s.hotStored.Load(), HotRefused: s.hotRefused.Load()}
}

// ServeHintless runs the hintless server of shape ShapeBucket; see
// ServeShape.
func ServeHintless(ctx context.Context, listen string, perSecond float64, burst int, in io.Reader, out io.Writer) error {
	return ServeShape(ctx, listen, ShapeBucket, perSecond, burst, in, out)
}

// ServeShape runs the hintless server on listen (e.g. 127.0.0.1:0) with
// the throttling of shape (one of Shapes; perSecond and burst are the
// bucket's, or the send queue's rate): it writes
// "listening ADDR" on out, then answers every "stats" line read from in
// with a ServerStats JSON line, and returns when in ends (EOF) or ctx is
// done, with the server stopped. When ctx ends first, the goroutine reading
// in ends when in does.
func ServeShape(ctx context.Context, listen, shape string, perSecond float64, burst int, in io.Reader, out io.Writer) error {
	return ServeSteps(ctx, listen, shape, perSecond, burst, nil, 0, in, out)
}

// ServeSteps is ServeShape whose bucket (shape ShapeBucket only) changes
// its rate as steps say, counting from when it starts listening or from
// the time of the last "start UNIXNANO" line read from in before the
// first step applies, and whose every call takes latency more (a round
// trip: half before the server decides, half after).
func ServeSteps(ctx context.Context, listen, shape string, perSecond float64, burst int, steps []RateStep, latency time.Duration, in io.Reader, out io.Writer) error {
	if !slices.Contains(Shapes, shape) {
		return fmt.Errorf("bench: hintless server: unknown shape %q (known: %q)", shape, Shapes)
	}
	if !(perSecond > 0) || burst < 1 {
		return fmt.Errorf("bench: hintless server: rate %v and burst %d must be > 0", perSecond, burst)
	}
	if latency < 0 {
		return fmt.Errorf("bench: hintless server: --latency %v must be >= 0", latency)
	}
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("bench: hintless server: %w", err)
	}
	if len(steps) > 0 && shape != ShapeBucket {
		return fmt.Errorf("bench: hintless server: --steps needs shape %s, not %s", ShapeBucket, shape)
	}
	svc := newHintlessServer(shape, perSecond, burst)
	svc.latency = latency
	if len(steps) > 0 {
		svc.sched = newRateSchedule(steps, time.Now())
	}
	gs := grpc.NewServer()
	rocketryv1.RegisterMessagingServiceServer(gs, svc)
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(lis) })
	defer wg.Wait()
	defer gs.Stop()

	if _, err := fmt.Fprintf(out, "listening %s\n", lis.Addr()); err != nil {
		return fmt.Errorf("bench: hintless server: %w", err)
	}
	lines := make(chan string)
	readDone := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			select {
			case lines <- strings.TrimSpace(sc.Text()):
			case <-ctx.Done():
				readDone <- nil
				return
			}
		}
		readDone <- sc.Err()
	}()
	enc := json.NewEncoder(out)
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-readDone:
			return err
		case line := <-lines:
			switch line {
			case "stats":
				if err := enc.Encode(svc.stats()); err != nil {
					return fmt.Errorf("bench: hintless server: %w", err)
				}
			case "":
			default:
				if at, ok := strings.CutPrefix(line, "start "); ok {
					n, err := strconv.ParseInt(at, 10, 64)
					if err != nil {
						return fmt.Errorf("bench: hintless server: request %q: want start UNIXNANO", line)
					}
					if svc.sched != nil {
						svc.sched.setZero(time.Unix(0, n))
					}
					continue
				}
				return fmt.Errorf("bench: hintless server: unknown request %q", line)
			}
		}
	}
}

// serverProcess is a hintless server in a child process.
type serverProcess struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr *lockedBuffer
	addr   string
	mu     sync.Mutex // one stats exchange at a time
}

// startServer starts argv (a command that runs ServeHintless on
// 127.0.0.1:0 with its stdin and stdout) with env added to the process's
// environment, and waits up to 10 s for its address.
func startServer(argv, env []string) (*serverProcess, error) {
	p, err := startChild(argv, env)
	if err != nil {
		return nil, err
	}
	line, err := p.readLine(10 * time.Second)
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok || addr == "" {
		p.stop()
		return nil, fmt.Errorf("bench: server %q: first line %q, %v; want \"listening ADDR\" (stderr %q)", argv, line, err, p.stderr.String())
	}
	p.addr = addr
	return p, nil
}

// startChild starts argv with env added to the process's environment, its
// stdin and stdout piped to the returned process and its stderr kept.
func startChild(argv, env []string) (*serverProcess, error) {
	if len(argv) == 0 {
		return nil, errors.New("bench: no child command")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	if len(env) > 0 {
		cmd.Env = append(cmd.Environ(), env...)
	}
	p := &serverProcess{cmd: cmd, stderr: &lockedBuffer{}}
	cmd.Stderr = p.stderr
	cmd.WaitDelay = 2 * time.Second
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.stdout = bufio.NewReader(stdout)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: starting %q: %w", argv, err)
	}
	return p, nil
}

// readLine reads one line of the child's stdout, giving up (and killing the
// child, which ends the read) after timeout.
func (p *serverProcess) readLine(timeout time.Duration) (string, error) {
	type read struct {
		line string
		err  error
	}
	ch := make(chan read, 1)
	go func() {
		l, err := p.stdout.ReadString('\n')
		ch <- read{l, err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.line, r.err
	case <-t.C:
		_ = p.cmd.Process.Kill()
		r := <-ch
		return r.line, fmt.Errorf("no answer in %v", timeout)
	}
}

// stats asks the child for its counters.
func (p *serverProcess) stats() (ServerStats, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var st ServerStats
	if _, err := io.WriteString(p.stdin, "stats\n"); err != nil {
		return st, fmt.Errorf("bench: server stats: %w", err)
	}
	line, err := p.readLine(10 * time.Second)
	if err != nil {
		return st, fmt.Errorf("bench: server stats: %w (stderr %q)", err, p.stderr.String())
	}
	if err := json.Unmarshal([]byte(line), &st); err != nil {
		return st, fmt.Errorf("bench: server stats %q: %w", line, err)
	}
	return st, nil
}

// send writes line to the child's stdin, expecting no answer.
func (p *serverProcess) send(line string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		return fmt.Errorf("bench: writing %q to a child: %w (stderr %q)", line, err, p.stderr.String())
	}
	return nil
}

// kill kills the child; stop still waits for it.
func (p *serverProcess) kill() { _ = p.cmd.Process.Kill() }

// stop closes the child's stdin, which makes it exit, and waits for it;
// after 5 s it kills it. It returns the child's error, if it failed.
func (p *serverProcess) stop() error {
	_ = p.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("bench: server: %w (stderr %q)", err, p.stderr.String())
		}
		return nil
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-done
		return fmt.Errorf("bench: server did not exit 5 s after its stdin closed; killed (stderr %q)", p.stderr.String())
	}
}

// lockedBuffer is the child's stderr: written by exec's copying goroutine,
// read in error messages.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 64<<10 {
		return len(p), nil // keep the first 64 KiB
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
