// Command produce sends messages to a RocketMQ 5 gRPC endpoint with the
// official Apache RocketMQ Go client (github.com/apache/rocketmq-clients/
// golang/v5, pinned in ../../go.mod) and prints one JSON summary on
// stdout, in the shape of ../../../node/produce.js's. The Go test in
// internal/interop runs it against rocketry's bundled broker; the package
// documentation there (doc.go) says what the client expects from a broker
// and how it retries.
//
// Usage:
//
//	produce --endpoint 127.0.0.1:8081 --topic t --count 300 \
//	  --concurrency 8 --max-attempts 3 [--property KEY=VALUE ...] \
//	  [--await-settings 10s] [--verbose]
//
// The client always dials TLS without verifying the certificate, so the
// endpoint must serve TLS. It registers its own apache.rocketmq.v2
// descriptors, which is why it runs in a process of its own.
//
// The client has no hook for its attempts, so the program wraps the
// client's exported NewRpcClient to give every connection it opens a gRPC
// interceptor that records each SendMessage call (when it began, how long
// it took, what came back) and each Settings command the broker pushes on
// Telemetry. The same wrapper silences the client's per-call gRPC log,
// which it otherwise writes to /tmp/rocketmq-logger.log; the client's own
// log (a warning per failed attempt) goes to stderr.
//
// Exit status: 0 when every message was sent or failed with an error from
// the client (see "failed" in the summary); 2 for bad arguments; 3 when the
// producer did not start (or, with --await-settings, no Settings came in
// time). The summary is printed in every case.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rocketry-go/rocketry/internal/interop/goclient/kit"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is the command line.
type config struct {
	endpoint, topic string
	count           int
	concurrency     int
	maxAttempts     int
	properties      map[string]string
	verbose         bool
	awaitSettings   time.Duration
	accessKey       string // --access-key: sign calls (with --secret-key)
	secretKey       string
}

func parse(args []string, stderr io.Writer) (config, error) {
	c := config{properties: map[string]string{}}
	fs := flag.NewFlagSet("produce", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.endpoint, "endpoint", "", "`host:port` of the broker (required; TLS)")
	fs.StringVar(&c.topic, "topic", "", "topic to send to (required)")
	fs.IntVar(&c.count, "count", 100, "messages to send")
	fs.IntVar(&c.concurrency, "concurrency", 8, "sends in flight at once")
	fs.IntVar(&c.maxAttempts, "max-attempts", 3, "the client's WithMaxAttempts")
	fs.BoolVar(&c.verbose, "verbose", false, "the client's info log on stderr too")
	fs.DurationVar(&c.awaitSettings, "await-settings", 10*time.Second,
		"after Start, wait this long at most for the broker's first Settings on Telemetry, which the client itself does not wait for (0: do not wait)")
	fs.StringVar(&c.accessKey, "access-key", "", "access key to sign every call with (the client's SessionCredentials; empty: unsigned)")
	fs.StringVar(&c.secretKey, "secret-key", "", "secret key of --access-key")
	fs.Func("property", "`KEY=VALUE` user property of every message (repeatable)", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok {
			return fmt.Errorf("%q is not KEY=VALUE", s)
		}
		c.properties[k] = v
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case c.endpoint == "":
		return c, errors.New("--endpoint is required")
	case c.topic == "":
		return c, errors.New("--topic is required")
	case c.count < 0:
		return c, fmt.Errorf("--count %d is negative", c.count)
	case c.concurrency < 1:
		return c, fmt.Errorf("--concurrency %d is not at least 1", c.concurrency)
	case c.maxAttempts < 1:
		return c, fmt.Errorf("--max-attempts %d is not at least 1", c.maxAttempts)
	case c.awaitSettings < 0:
		return c, fmt.Errorf("--await-settings %v is negative", c.awaitSettings)
	}
	return c, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	start := time.Now()
	ms := func(t time.Time) float64 { return float64(t.Sub(start).Microseconds()) / 1000 }
	s := summary{Client: clientInfo{Package: kit.ClientModule, Version: kit.ClientVersion()}}
	emit := func(status int, msg string) int {
		s.Error = msg
		s.TotalMs = ms(time.Now())
		if err := json.NewEncoder(stdout).Encode(&s); err != nil {
			fmt.Fprintf(stderr, "produce: writing the summary: %v\n", err)
			return 1
		}
		return status
	}
	cfg, err := parse(args, stderr)
	if err != nil {
		return emit(2, err.Error())
	}
	kit.LogToStderr(cfg.verbose)
	rec := newRecorder(start)
	rec.install()

	p, err := rmq.NewProducer(&rmq.Config{
		Endpoint:    cfg.endpoint,
		Credentials: &credentials.SessionCredentials{AccessKey: cfg.accessKey, AccessSecret: cfg.secretKey},
	}, rmq.WithTopics(cfg.topic), rmq.WithMaxAttempts(int32(cfg.maxAttempts)))
	if err != nil {
		return emit(3, "NewProducer: "+err.Error())
	}
	if err := p.Start(); err != nil {
		s.StartupMs = ms(time.Now())
		s.StartupError = kit.Describe(err)
		return emit(3, "startup: "+err.Error())
	}
	if cfg.awaitSettings > 0 {
		select {
		case <-rec.settled:
		case <-time.After(cfg.awaitSettings):
			s.StartupMs = ms(time.Now())
			p.GracefulStop()
			return emit(3, fmt.Sprintf("startup: no Settings from the broker on Telemetry in %v", cfg.awaitSettings))
		}
	}
	s.StartupMs = ms(time.Now())

	messages := make([]message, cfg.count)
	var (
		next int
		mu   sync.Mutex
		wg   sync.WaitGroup
	)
	sendStart := time.Now()
	for range min(cfg.concurrency, max(cfg.count, 1)) {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= cfg.count {
					return
				}
				messages[i] = send(p, cfg, i, start)
			}
		})
	}
	wg.Wait()
	s.SendMs = float64(time.Since(sendStart).Microseconds()) / 1000

	attempts, keyToID, settings := rec.snapshot()
	requests := map[*attempt]bool{}
	for i := range messages {
		m := &messages[i]
		m.MessageID = keyToID[m.Key]
		m.Attempts = attempts[m.MessageID]
		for _, a := range m.Attempts {
			requests[a] = true
		}
		if m.OK {
			s.Sent++
		} else {
			s.Failed++
		}
	}
	s.SendRequests = len(requests)
	s.Messages = messages
	s.Settings = settings
	if err := p.GracefulStop(); err != nil {
		s.ShutdownError = kit.Describe(err)
	}
	return emit(0, "")
}

// send sends message i and reports what Send returned.
func send(p rmq.Producer, cfg config, i int, start time.Time) message {
	key := fmt.Sprintf("interop-%d", i)
	m := message{Index: i, Key: key}
	msg := &rmq.Message{Topic: cfg.topic, Body: fmt.Appendf(nil, `{"index":%d}`, i)}
	msg.SetTag("interop")
	msg.SetKeys(key)
	for k, v := range cfg.properties {
		msg.AddProperty(k, v)
	}
	begin := time.Now()
	receipts, err := p.Send(context.Background(), msg)
	m.ElapsedMs = float64(time.Since(begin).Microseconds()) / 1000
	if err != nil {
		m.Error = kit.Describe(err)
		return m
	}
	m.OK = true
	if len(receipts) > 0 {
		m.Receipt = &receipt{MessageID: receipts[0].MessageID, Offset: receipts[0].Offset}
	}
	return m
}

// silentLogger replaces the client's per-call gRPC log file.
var silentLogger = zap.NewNop()

// connOptions are what the recorder adds to every connection the client
// opens.
func (r *recorder) connOptions() rmq.RpcClientOption {
	return rmq.WithRpcClientConnOption(
		rmq.WithZapLogger(silentLogger),
		rmq.WithDialOptions(
			grpc.WithChainUnaryInterceptor(r.unary),
			grpc.WithChainStreamInterceptor(r.stream),
		),
	)
}

// install wraps the client's NewRpcClient so that every connection carries
// the recorder's interceptors.
func (r *recorder) install() {
	newRPCClient := rmq.NewRpcClient
	rmq.NewRpcClient = func(target string, opts ...rmq.RpcClientOption) (rmq.RpcClient, error) {
		return newRPCClient(target, append(opts, r.connOptions())...)
	}
}
