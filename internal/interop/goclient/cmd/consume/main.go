// Command consume sends FIFO and timed messages with the official Apache
// RocketMQ Go client's Producer and reads them back with its
// SimpleConsumer (github.com/apache/rocketmq-clients/golang/v5, pinned in
// ../../go.mod), then prints one JSON summary on stdout, in the shape of
// ../../../node/consume.js's. The Go test in internal/interop runs it
// against rocketry's bundled broker and checks the summary: every group in
// send order, nothing missing or doubled, no timed message received before
// its delivery time.
//
// Usage:
//
//	consume --endpoint 127.0.0.1:8081 --fifo-topic f --timed-topic d \
//	  --group g --groups 4 --per-group 20 --timed 5 --timed-delay 1500ms \
//	  --invisible 1s --await 1s --skip-ack-every 7 --change-every 5 \
//	  --timeout 30s [--verbose]
//
// The client always dials TLS without verifying the certificate, so the
// endpoint must serve TLS. Each group's messages are sent one after
// another (each Send waits for the previous one's receipt), the groups
// side by side, the timed messages alongside. The consumer then receives
// (its Receive takes the subscribed topics in turn) and acknowledges every
// message at once, except the first delivery of every --skip-ack-every-th
// message it receives, which it leaves to come back after its invisible
// time; and of every --change-every-th delivery it acknowledges, it first
// renews the invisible time (ChangeInvisibleDuration, which gives the
// message a new receipt handle, the one Ack then sends). Every delivery and
// acknowledgement is logged in one sequence
// ("seq"), so that the test can check that a group's next message never
// came before the previous one was acknowledged.
//
// The client's Ack returns nil whatever status the broker answers
// (simple_consumer.go, Ack, reads the status only for its metrics), so the
// program reads each AckMessage answer with a gRPC interceptor: an
// acknowledgement is logged as "ack" only when the broker answered 20000,
// else as "ackError". The same wrapper silences the client's per-call gRPC
// log, which it otherwise writes to /tmp/rocketmq-logger.log; the client's
// own log goes to stderr.
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
	"sync"
	"time"

	"github.com/rocketry-go/rocketry/internal/interop/goclient/kit"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
)

// receiveBatch is the max_message_num of each Receive.
const receiveBatch = 16

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is the command line.
type config struct {
	endpoint, fifoTopic, timedTopic, group string
	groups, perGroup, timed                int
	timedDelay, invisible, await, timeout  time.Duration
	skipAckEvery, changeEvery              int
	verbose                                bool
}

func parse(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("consume", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.endpoint, "endpoint", "", "`host:port` of the broker (required; TLS)")
	fs.StringVar(&c.fifoTopic, "fifo-topic", "", "topic of the FIFO messages (required)")
	fs.StringVar(&c.timedTopic, "timed-topic", "", "topic of the timed messages (required)")
	fs.StringVar(&c.group, "group", "interop-consumer", "the SimpleConsumer's consumer group")
	fs.IntVar(&c.groups, "groups", 4, "message groups")
	fs.IntVar(&c.perGroup, "per-group", 25, "messages per group")
	fs.IntVar(&c.timed, "timed", 5, "timed messages")
	fs.DurationVar(&c.timedDelay, "timed-delay", 1500*time.Millisecond, "how far ahead of its send a timed message is due")
	fs.DurationVar(&c.invisible, "invisible", 10*time.Second, "invisible duration of each Receive")
	fs.DurationVar(&c.await, "await", time.Second, "the SimpleConsumer's WithAwaitDuration")
	fs.IntVar(&c.skipAckEvery, "skip-ack-every", 0, "leave the first delivery of every n-th message received unacknowledged (0: none)")
	fs.IntVar(&c.changeEvery, "change-every", 0, "renew the invisible time of every n-th delivery acknowledged before its Ack (0: none)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "give up receiving after this long")
	fs.BoolVar(&c.verbose, "verbose", false, "the client's info log on stderr too")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case c.endpoint == "":
		return c, errors.New("--endpoint is required")
	case c.fifoTopic == "":
		return c, errors.New("--fifo-topic is required")
	case c.timedTopic == "":
		return c, errors.New("--timed-topic is required")
	case c.group == "":
		return c, errors.New("--group is empty")
	case c.groups < 0, c.perGroup < 0, c.timed < 0, c.skipAckEvery < 0, c.changeEvery < 0:
		return c, fmt.Errorf("--groups %d, --per-group %d, --timed %d, --skip-ack-every %d, --change-every %d: none may be negative",
			c.groups, c.perGroup, c.timed, c.skipAckEvery, c.changeEvery)
	case c.timedDelay < 0:
		return c, fmt.Errorf("--timed-delay %v is negative", c.timedDelay)
	case c.invisible <= 0, c.await <= 0, c.timeout <= 0:
		return c, fmt.Errorf("--invisible %v, --await %v, --timeout %v: each must be positive", c.invisible, c.await, c.timeout)
	}
	return c, nil
}

// summary is the JSON the program prints; its fields are those of
// consume.js's summary, so that one Go type reads both.
type summary struct {
	Client        clientInfo         `json:"client"`
	Error         string             `json:"error,omitempty"`
	StartupError  *kit.ClientError   `json:"startupError,omitempty"`
	ShutdownError *kit.ClientError   `json:"shutdownError,omitempty"`
	Groups        int                `json:"groups"`
	PerGroup      int                `json:"perGroup"`
	Timed         int                `json:"timed"`
	Sent          []sent             `json:"sent"`
	SendErrors    []sendError        `json:"sendErrors"`
	ReceiveErrors []*kit.ClientError `json:"receiveErrors"`
	// EmptyReceives counts the Receive calls that returned 40401
	// MESSAGE_NOT_FOUND, which the client returns as an error.
	EmptyReceives int `json:"emptyReceives"`
	// InvisibleChanges counts the ChangeInvisibleDuration calls the broker
	// answered 20000; a failed one is an "ackError" event.
	InvisibleChanges int     `json:"invisibleChanges"`
	Events           []event `json:"events"`
}

type clientInfo struct {
	Package string `json:"package"`
	Version string `json:"version"`
}

// sent is a message sent: a FIFO one (group, seq) or a timed one (seq,
// deliverAtMs).
type sent struct {
	Kind        string `json:"kind"`
	Group       string `json:"group,omitempty"`
	Seq         int    `json:"seq"`
	MessageID   string `json:"messageId"`
	DeliverAtMs int64  `json:"deliverAtMs,omitempty"`
	SentAtMs    int64  `json:"sentAtMs"`
}

type sendError struct {
	Kind  string           `json:"kind"`
	Group string           `json:"group,omitempty"`
	Seq   int              `json:"seq"`
	Error *kit.ClientError `json:"error"`
}

// event is a delivery ("receive"), an acknowledgement the broker answered
// 20000 ("ack") or one that failed ("ackError"), numbered in the order the
// program saw them. Times are Unix milliseconds.
type event struct {
	Seq                 int              `json:"seq"`
	Kind                string           `json:"kind"`
	AtMs                int64            `json:"atMs"`
	Topic               string           `json:"topic,omitempty"`
	MessageID           string           `json:"messageId"`
	Group               *string          `json:"group"`
	Attempt             int32            `json:"attempt,omitempty"`
	DeliveryTimestampMs *int64           `json:"deliveryTimestampMs,omitempty"`
	SkippedAck          bool             `json:"skippedAck,omitempty"`
	ChangedInvisible    bool             `json:"changedInvisible,omitempty"`
	Error               *kit.ClientError `json:"error,omitempty"`
}

func run(args []string, stdout, stderr io.Writer) int {
	s := summary{Client: clientInfo{Package: kit.ClientModule, Version: kit.ClientVersion()}}
	emit := func(code int, msg string) int {
		if msg != "" {
			s.Error = msg
		}
		if err := json.NewEncoder(stdout).Encode(&s); err != nil {
			fmt.Fprintf(stderr, "consume: writing the summary: %v\n", err)
			return 1
		}
		return code
	}
	cfg, err := parse(args, stderr)
	if err != nil {
		return emit(2, err.Error())
	}
	s.Groups, s.PerGroup, s.Timed = cfg.groups, cfg.perGroup, cfg.timed
	kit.LogToStderr(cfg.verbose)
	acks := &kit.Acks{}
	kit.Intercept(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		acks.Record(req, reply, err)
		return err
	})

	p, err := rmq.NewProducer(&rmq.Config{Endpoint: cfg.endpoint, Credentials: &credentials.SessionCredentials{}},
		rmq.WithTopics(cfg.fifoTopic, cfg.timedTopic))
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
		rmq.WithSubscriptionExpressions(map[string]*rmq.FilterExpression{cfg.fifoTopic: rmq.SUB_ALL, cfg.timedTopic: rmq.SUB_ALL}))
	if err != nil {
		p.GracefulStop()
		return emit(3, "NewSimpleConsumer: "+err.Error())
	}
	if err := c.Start(); err != nil {
		s.StartupError = kit.Describe(err)
		p.GracefulStop()
		return emit(3, "consumer startup: "+err.Error())
	}

	s.Sent, s.SendErrors = sendAll(p, cfg)
	r := receiveAll(c, cfg, acks, len(s.Sent))
	s.Events, s.ReceiveErrors, s.EmptyReceives, s.InvisibleChanges, s.Error = r.events, r.receiveErrors, r.empty, r.changes, r.errText

	for _, stop := range []func() error{c.GracefulStop, p.GracefulStop} {
		if err := stop(); err != nil {
			s.ShutdownError = kit.Describe(err)
		}
	}
	return emit(0, "")
}

// sendAll sends each group's messages one after another, the groups and
// the timed messages side by side. A group stops at its first failure, so
// that it is never sent out of order.
func sendAll(p rmq.Producer, cfg config) ([]sent, []sendError) {
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		out    = []sent{}
		failed = []sendError{}
	)
	for g := range cfg.groups {
		wg.Go(func() {
			group := fmt.Sprintf("group-%d", g)
			for i := range cfg.perGroup {
				msg := &rmq.Message{Topic: cfg.fifoTopic, Body: fmt.Appendf(nil, `{"group":%q,"seq":%d}`, group, i)}
				msg.SetTag("fifo")
				msg.SetKeys(fmt.Sprintf("%s-%d", group, i))
				msg.SetMessageGroup(group)
				r, err := p.Send(context.Background(), msg)
				mu.Lock()
				if err != nil {
					failed = append(failed, sendError{Kind: "fifo", Group: group, Seq: i, Error: kit.Describe(err)})
					mu.Unlock()
					return
				}
				out = append(out, sent{Kind: "fifo", Group: group, Seq: i, MessageID: receiptID(r), SentAtMs: time.Now().UnixMilli()})
				mu.Unlock()
			}
		})
	}
	for i := range cfg.timed {
		wg.Go(func() {
			// Whole milliseconds, so that the delivery time the consumer
			// reads back compares exactly.
			at := time.UnixMilli(time.Now().Add(cfg.timedDelay).UnixMilli())
			msg := &rmq.Message{Topic: cfg.timedTopic, Body: fmt.Appendf(nil, `{"timed":%d}`, i)}
			msg.SetTag("timed")
			msg.SetKeys(fmt.Sprintf("timed-%d", i))
			msg.SetDelayTimestamp(at)
			r, err := p.Send(context.Background(), msg)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, sendError{Kind: "timed", Seq: i, Error: kit.Describe(err)})
				return
			}
			out = append(out, sent{Kind: "timed", Seq: i, MessageID: receiptID(r), DeliverAtMs: at.UnixMilli(), SentAtMs: time.Now().UnixMilli()})
		})
	}
	wg.Wait()
	return out, failed
}

func receiptID(r []*rmq.SendReceipt) string {
	if len(r) == 0 {
		return ""
	}
	return r[0].MessageID
}

// received is what receiveAll saw.
type received struct {
	events        []event
	receiveErrors []*kit.ClientError
	empty         int // Receive calls answered 40401
	changes       int // ChangeInvisibleDuration calls answered 20000
	errText       string
}

// receiveAll receives until want distinct messages are acknowledged, or
// the time is up.
func receiveAll(c rmq.SimpleConsumer, cfg config, acks *kit.Acks, want int) received {
	r := received{events: []event{}, receiveErrors: []*kit.ClientError{}}
	acked := map[string]bool{}
	n, toAck := 0, 0
	deadline := time.Now().Add(cfg.timeout)
	for len(acked) < want && time.Now().Before(deadline) {
		views, err := c.Receive(context.Background(), receiveBatch, cfg.invisible)
		if err != nil {
			var rs *rmq.ErrRpcStatus
			if errors.As(err, &rs) && rs.Code == int32(v2.Code_MESSAGE_NOT_FOUND) {
				r.empty++
				continue
			}
			r.receiveErrors = append(r.receiveErrors, kit.Describe(err))
			if len(r.receiveErrors) >= 20 {
				r.errText = fmt.Sprintf("Receive failed %d times; the last: %v", len(r.receiveErrors), err)
				return r
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for _, v := range views {
			n++
			e := event{
				Seq: len(r.events), Kind: "receive", AtMs: time.Now().UnixMilli(), Topic: v.GetTopic(),
				MessageID: v.GetMessageId(), Group: v.GetMessageGroup(), Attempt: v.GetDeliveryAttempt(),
			}
			if ts := v.GetDeliveryTimestamp(); ts != nil {
				ms := ts.UnixMilli()
				e.DeliveryTimestampMs = &ms
			}
			if cfg.skipAckEvery > 0 && v.GetDeliveryAttempt() == 1 && n%cfg.skipAckEvery == 0 {
				e.SkippedAck = true
				r.events = append(r.events, e)
				continue
			}
			toAck++
			e.ChangedInvisible = cfg.changeEvery > 0 && toAck%cfg.changeEvery == 0
			r.events = append(r.events, e)
			var err error
			if e.ChangedInvisible {
				// The client's ChangeInvisibleDuration reads the status
				// and puts the new receipt handle in v.
				if err = c.ChangeInvisibleDuration(v, cfg.invisible); err == nil {
					r.changes++
				}
			}
			if err == nil {
				err = c.Ack(context.Background(), v)
			}
			if err == nil {
				if st := acks.Take(v.GetReceiptHandle()); st.GetCode() != v2.Code_OK {
					err = &rmq.ErrRpcStatus{Code: int32(st.GetCode()), Message: st.GetMessage()}
				}
			}
			a := event{Seq: len(r.events), Kind: "ack", AtMs: time.Now().UnixMilli(), MessageID: v.GetMessageId(), Group: v.GetMessageGroup()}
			if err != nil {
				a.Kind, a.Error = "ackError", kit.Describe(err)
			} else {
				acked[v.GetMessageId()] = true
			}
			r.events = append(r.events, a)
		}
	}
	if len(acked) < want {
		r.errText = fmt.Sprintf("acknowledged %d of %d messages in %v", len(acked), want, cfg.timeout)
	}
	return r
}
