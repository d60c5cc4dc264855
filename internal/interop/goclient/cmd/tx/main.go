// Command tx drives transactions with the official Apache RocketMQ Go
// client's Producer (github.com/apache/rocketmq-clients/golang/v5, pinned
// in ../../go.mod) and reads the topic back with its SimpleConsumer, then
// prints one JSON summary on stdout, in the shape of ../../../node/tx.js's
// (without recall, which 5.1.2 does not have). The Go test in
// internal/interop (goclient_tx_test.go) runs it against rocketry's
// bundled broker and checks the summary.
//
// Usage:
//
//	tx --endpoint 127.0.0.1:8081 --topic t --group g --await 200ms \
//	  --invisible 10s --timeout 30s [--verbose]
//
// The client always dials TLS without verifying the certificate, so the
// endpoint must serve TLS. It sends, each message in its own transaction
// (BeginTransaction, SendWithTransaction): "commit" then commits it,
// "rollback" then rolls it back, "orphan-commit" and "orphan-rollback" and
// ends neither: the broker's check sends a RecoverOrphanedTransactionCommand
// on the producer's Telemetry stream, and the producer's TransactionChecker
// answers COMMIT or ROLLBACK from the message's key (UNKNOWN for any other
// key). Then "pair-1", "pair-2" and "pair-3" in one transaction, which
// it commits: the client takes two messages in a transaction, not one,
// and refuses the third (see sendPair). The consumer receives and
// acknowledges until "commit", "orphan-commit", "pair-1" and "pair-2" are
// acknowledged and both open transactions were answered, then receives
// once more; the test checks that nothing else came.
//
// The client's Commit and RollBack return nil whatever happens
// (transaction.go: they only log a failed EndTransaction), and its checker
// sends EndTransaction on a goroutine whose error it only logs
// (producer.go, onRecoverOrphanedTransactionCommand), so the program reads
// every EndTransaction request and answer (and every AckMessage answer)
// with a gRPC interceptor: "ends" in the summary. The same wrapper silences
// the client's per-call gRPC log; its own log goes to stderr.
//
// Exit status: 0 with the summary (see "error" for a run that did not
// finish); 2 for bad arguments; 3 when a client did not start.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/rocketry-go/rocketry/internal/interop/goclient/kit"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is the command line.
type config struct {
	endpoint, topic, group    string
	await, invisible, timeout time.Duration
	verbose                   bool
}

func parse(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("tx", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.endpoint, "endpoint", "", "`host:port` of the broker (required; TLS)")
	fs.StringVar(&c.topic, "topic", "", "topic of the transactional messages (required)")
	fs.StringVar(&c.group, "group", "interop-tx-consumer", "the SimpleConsumer's consumer group")
	fs.DurationVar(&c.await, "await", time.Second, "the SimpleConsumer's WithAwaitDuration")
	fs.DurationVar(&c.invisible, "invisible", 10*time.Second, "invisible duration of each Receive")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "give up receiving after this long")
	fs.BoolVar(&c.verbose, "verbose", false, "the client's info log on stderr too")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case c.endpoint == "":
		return c, errors.New("--endpoint is required")
	case c.topic == "":
		return c, errors.New("--topic is required")
	case c.group == "":
		return c, errors.New("--group is empty")
	case c.await <= 0, c.invisible <= 0, c.timeout <= 0:
		return c, fmt.Errorf("--await %v, --invisible %v, --timeout %v: each must be positive", c.await, c.invisible, c.timeout)
	}
	return c, nil
}

// summary is the JSON the program prints: tx.js's fields (no recall), plus
// the EndTransaction calls ("ends").
type summary struct {
	Client        clientInfo         `json:"client"`
	Error         string             `json:"error,omitempty"`
	StartupError  *kit.ClientError   `json:"startupError,omitempty"`
	ShutdownError *kit.ClientError   `json:"shutdownError,omitempty"`
	Sent          []sent             `json:"sent"`
	Errors        []stepError        `json:"errors"`
	Checks        []checkCall        `json:"checks"`
	Ends          []endCall          `json:"ends"`
	Pair          *pairResult        `json:"pair"`
	ReceiveErrors []*kit.ClientError `json:"receiveErrors"`
	// EmptyReceives counts the Receive calls answered 40401
	// MESSAGE_NOT_FOUND, which the client returns as an error.
	EmptyReceives int     `json:"emptyReceives"`
	Events        []event `json:"events"`
}

type clientInfo struct {
	Package string `json:"package"`
	Version string `json:"version"`
}

type sent struct {
	Key           string `json:"key"`
	MessageID     string `json:"messageId"`
	TransactionID string `json:"transactionId"`
}

type stepError struct {
	Step  string           `json:"step"`
	Error *kit.ClientError `json:"error"`
}

// checkCall is a call of the producer's TransactionChecker.
type checkCall struct {
	Key        string `json:"key"`
	MessageID  string `json:"messageId"`
	Resolution string `json:"resolution"`
	AtMs       int64  `json:"atMs"`
}

// endCall is an EndTransaction request the client sent and the broker's
// answer: Code is the status code, 0 with Error for a gRPC failure.
type endCall struct {
	MessageID     string           `json:"messageId"`
	TransactionID string           `json:"transactionId"`
	Resolution    string           `json:"resolution"`
	Source        string           `json:"source"`
	Code          int              `json:"code"`
	Error         *kit.ClientError `json:"error,omitempty"`
	AtMs          int64            `json:"atMs"`
}

// event is a delivery ("receive"), an acknowledgement the broker answered
// 20000 ("ack") or one that failed ("ackError").
type event struct {
	Kind      string           `json:"kind"`
	Key       string           `json:"key"`
	MessageID string           `json:"messageId"`
	AtMs      int64            `json:"atMs"`
	Error     *kit.ClientError `json:"error,omitempty"`
}

// recorder keeps what the client does not return: the checker's calls,
// the EndTransaction calls and the AckMessage answers.
type recorder struct {
	mu     sync.Mutex
	checks []checkCall
	ends   []endCall
	acks   kit.Acks
}

// check is the producer's TransactionChecker: COMMIT for "orphan-commit",
// ROLLBACK for "orphan-rollback", UNKNOWN for any other key.
func (r *recorder) check(mv *rmq.MessageView) rmq.TransactionResolution {
	key := ""
	if ks := mv.GetKeys(); len(ks) > 0 {
		key = ks[0]
	}
	res, name := rmq.UNKNOWN, "UNKNOWN"
	switch key {
	case "orphan-commit":
		res, name = rmq.COMMIT, "COMMIT"
	case "orphan-rollback":
		res, name = rmq.ROLLBACK, "ROLLBACK"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks = append(r.checks, checkCall{Key: key, MessageID: mv.GetMessageId(), Resolution: name, AtMs: time.Now().UnixMilli()})
	return res
}

func (r *recorder) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	switch q := req.(type) {
	case *v2.EndTransactionRequest:
		e := endCall{
			MessageID: q.GetMessageId(), TransactionID: q.GetTransactionId(),
			Resolution: q.GetResolution().String(), Source: q.GetSource().String(), AtMs: time.Now().UnixMilli(),
		}
		if err != nil {
			e.Error = kit.Describe(err)
		} else if resp, ok := reply.(*v2.EndTransactionResponse); ok {
			e.Code = int(resp.GetStatus().GetCode())
		}
		r.mu.Lock()
		r.ends = append(r.ends, e)
		r.mu.Unlock()
	case *v2.AckMessageRequest:
		r.acks.Record(req, reply, err)
	}
	return err
}

// resolved reports whether the checker was called for both open
// transactions and the broker answered an EndTransaction for each.
func (r *recorder) resolved(sent []sent) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range sent {
		if s.Key != "orphan-commit" && s.Key != "orphan-rollback" {
			continue
		}
		if !slices.ContainsFunc(r.ends, func(e endCall) bool {
			return e.TransactionID == s.TransactionID && e.Error == nil && e.Code == int(v2.Code_OK)
		}) {
			return false
		}
	}
	return true
}

func run(args []string, stdout, stderr io.Writer) int {
	s := summary{Client: clientInfo{Package: kit.ClientModule, Version: kit.ClientVersion()}}
	rec := &recorder{}
	emit := func(code int, msg string) int {
		if msg != "" {
			s.Error = msg
		}
		rec.mu.Lock()
		s.Checks, s.Ends = append([]checkCall{}, rec.checks...), append([]endCall{}, rec.ends...)
		rec.mu.Unlock()
		if err := json.NewEncoder(stdout).Encode(&s); err != nil {
			fmt.Fprintf(stderr, "tx: writing the summary: %v\n", err)
			return 1
		}
		return code
	}
	cfg, err := parse(args, stderr)
	if err != nil {
		return emit(2, err.Error())
	}
	kit.LogToStderr(cfg.verbose)
	kit.Intercept(rec.unary)

	p, err := rmq.NewProducer(&rmq.Config{Endpoint: cfg.endpoint, Credentials: &credentials.SessionCredentials{}},
		rmq.WithTopics(cfg.topic), rmq.WithTransactionChecker(&rmq.TransactionChecker{Check: rec.check}))
	if err != nil {
		return emit(3, "NewProducer: "+err.Error())
	}
	if err := p.Start(); err != nil {
		s.StartupError = kit.Describe(err)
		return emit(3, "producer startup: "+err.Error())
	}
	c, err := rmq.NewSimpleConsumer(&rmq.Config{
		Endpoint: cfg.endpoint, ConsumerGroup: cfg.group, Credentials: &credentials.SessionCredentials{},
	},
		rmq.WithAwaitDuration(cfg.await),
		rmq.WithSubscriptionExpressions(map[string]*rmq.FilterExpression{cfg.topic: rmq.SUB_ALL}))
	if err != nil {
		p.GracefulStop()
		return emit(3, "NewSimpleConsumer: "+err.Error())
	}
	if err := c.Start(); err != nil {
		s.StartupError = kit.Describe(err)
		p.GracefulStop()
		return emit(3, "consumer startup: "+err.Error())
	}

	s.Sent, s.Errors = []sent{}, []stepError{}
	for _, k := range []struct{ key, end string }{
		{"commit", "commit"}, {"rollback", "rollback"}, {"orphan-commit", ""}, {"orphan-rollback", ""},
	} {
		tx := p.BeginTransaction()
		msg := &rmq.Message{Topic: cfg.topic, Body: []byte(k.key)}
		msg.SetTag("tx")
		msg.SetKeys(k.key)
		r, err := p.SendWithTransaction(context.Background(), msg, tx)
		if err == nil && len(r) != 1 {
			err = fmt.Errorf("SendWithTransaction returned %d receipts; want 1", len(r))
		}
		if err != nil {
			s.Errors = append(s.Errors, stepError{Step: k.key, Error: kit.Describe(err)})
			continue
		}
		s.Sent = append(s.Sent, sent{Key: k.key, MessageID: r[0].MessageID, TransactionID: r[0].TransactionId})
		// Commit and RollBack return nil whatever the broker answers; the
		// interceptor records the answer.
		switch k.end {
		case "commit":
			err = tx.Commit()
		case "rollback":
			err = tx.RollBack()
		}
		if err != nil {
			s.Errors = append(s.Errors, stepError{Step: k.end + " " + k.key, Error: kit.Describe(err)})
		}
	}

	s.Pair = sendPair(p, cfg.topic, &s)

	s.Events, s.ReceiveErrors = []event{}, []*kit.ClientError{}
	want := map[string]bool{"commit": true, "orphan-commit": true, "pair-1": true, "pair-2": true}
	acked := map[string]bool{}
	deadline := time.Now().Add(cfg.timeout)
	extra := 1
	for time.Now().Before(deadline) {
		if len(acked) == len(want) && rec.resolved(s.Sent) {
			if extra == 0 {
				break
			}
			extra--
		}
		views, err := c.Receive(context.Background(), 16, cfg.invisible)
		if err != nil {
			var rs *rmq.ErrRpcStatus
			if errors.As(err, &rs) && rs.Code == int32(v2.Code_MESSAGE_NOT_FOUND) {
				s.EmptyReceives++
				continue
			}
			s.ReceiveErrors = append(s.ReceiveErrors, kit.Describe(err))
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for _, v := range views {
			key := ""
			if ks := v.GetKeys(); len(ks) > 0 {
				key = ks[0]
			}
			s.Events = append(s.Events, event{Kind: "receive", Key: key, MessageID: v.GetMessageId(), AtMs: time.Now().UnixMilli()})
			err := c.Ack(context.Background(), v)
			if err == nil {
				if st := rec.acks.Take(v.GetReceiptHandle()); st.GetCode() != v2.Code_OK {
					err = &rmq.ErrRpcStatus{Code: int32(st.GetCode()), Message: st.GetMessage()}
				}
			}
			a := event{Kind: "ack", Key: key, MessageID: v.GetMessageId(), AtMs: time.Now().UnixMilli()}
			if err != nil {
				a.Kind, a.Error = "ackError", kit.Describe(err)
			} else {
				acked[key] = true
			}
			s.Events = append(s.Events, a)
		}
	}
	msg := ""
	switch {
	case len(acked) < len(want):
		msg = fmt.Sprintf("acknowledged %d of the %d committed messages in %v", len(acked), len(want), cfg.timeout)
	case !rec.resolved(s.Sent):
		msg = fmt.Sprintf("the open transactions were not both resolved through the checker in %v", cfg.timeout)
	}
	for _, stop := range []func() error{c.GracefulStop, p.GracefulStop} {
		if err := stop(); err != nil {
			s.ShutdownError = kit.Describe(err)
		}
	}
	return emit(0, msg)
}

// sendPair sends "pair-1", "pair-2" and "pair-3" in one transaction and
// commits it. The client means a transaction to hold one message
// (MAX_MESSAGE_NUM) but refuses one only when it holds more than that
// (transaction.go, tryAddMessage), so it takes two and refuses the third;
// Commit then ends each of the two (each its own transaction on the
// broker). The third's refusal is recorded in the result, not as a
// failed step.
func sendPair(p rmq.Producer, topic string, s *summary) *pairResult {
	r := &pairResult{}
	tx := p.BeginTransaction()
	for _, key := range []string{"pair-1", "pair-2", "pair-3"} {
		msg := &rmq.Message{Topic: topic, Body: []byte(key)}
		msg.SetTag("tx")
		msg.SetKeys(key)
		rs, err := p.SendWithTransaction(context.Background(), msg, tx)
		switch {
		case err != nil && key == "pair-3":
			r.ThirdError = kit.Describe(err)
		case err != nil:
			s.Errors = append(s.Errors, stepError{Step: key, Error: kit.Describe(err)})
		case len(rs) != 1:
			s.Errors = append(s.Errors, stepError{Step: key, Error: &kit.ClientError{Name: "Error", Message: fmt.Sprintf("%d receipts; want 1", len(rs))}})
		default:
			s.Sent = append(s.Sent, sent{Key: key, MessageID: rs[0].MessageID, TransactionID: rs[0].TransactionId})
		}
	}
	if err := tx.Commit(); err != nil {
		s.Errors = append(s.Errors, stepError{Step: "commit pair", Error: kit.Describe(err)})
	}
	return r
}

// pairResult is what sendPair saw of the third message.
type pairResult struct {
	ThirdError *kit.ClientError `json:"thirdError"`
}
