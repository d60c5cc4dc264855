package wirermq

import (
	"context"
	"os"
	"runtime"
	"sync"
	"time"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/senderr"
	"google.golang.org/protobuf/types/known/durationpb"
)

// rmqTelemetry is the telemetry session of one connection: a Telemetry
// stream that opens with the client's Settings and stays open, the
// server's Settings and commands arriving on it. When the stream ends or
// breaks, the session opens a new one after a wait (doubling from
// reopenMin to reopenMax, back to reopenMin once a stream got Settings),
// until the client stops.
type rmqTelemetry struct {
	c    *rmqClient
	conn *rmqConn

	mu      sync.Mutex // serialises Send; guards the fields below
	stream  rocketmqv2.MessagingService_TelemetryClient
	lastErr error
}

// run is the session's goroutine.
func (t *rmqTelemetry) run() {
	defer t.c.wg.Done()
	wait := t.c.reopenMin
	for {
		got, err := t.session()
		t.mu.Lock()
		t.lastErr = err
		t.mu.Unlock()
		if t.c.ctx.Err() != nil {
			return
		}
		select {
		case t.c.telEnded <- struct{}{}:
		default:
		}
		t.c.logger.Debug("rocketmq: telemetry stream ended", "endpoint", t.conn.addr, "err", err)
		if got {
			wait = t.c.reopenMin
		}
		tm := time.NewTimer(wait)
		select {
		case <-t.c.ctx.Done():
			tm.Stop()
			return
		case <-tm.C:
		}
		wait = min(wait*2, t.c.reopenMax)
	}
}

// session runs one stream to its end; got reports whether it carried the
// server's Settings.
func (t *rmqTelemetry) session() (got bool, err error) {
	ctx, cancel := context.WithCancel(t.c.ctx)
	defer cancel()
	stream, err := t.conn.stub.Telemetry(t.c.outgoing(ctx))
	if err != nil {
		return false, err
	}
	t.mu.Lock()
	t.stream = stream
	err = stream.Send(t.c.settingsCommand())
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.stream = nil
		t.mu.Unlock()
	}()
	if err != nil {
		return false, sendErr(stream, err)
	}
	for {
		cmd, err := stream.Recv()
		if err != nil {
			return got, err
		}
		switch k := cmd.GetCommand().(type) {
		case *rocketmqv2.TelemetryCommand_Settings:
			t.c.applySettings(k.Settings)
			got = true
		case *rocketmqv2.TelemetryCommand_PrintThreadStackTraceCommand:
			t.send(&rocketmqv2.TelemetryCommand{
				Status: &rocketmqv2.Status{Code: rocketmqv2.Code_OK},
				Command: &rocketmqv2.TelemetryCommand_ThreadStackTrace{ThreadStackTrace: &rocketmqv2.ThreadStackTrace{
					Nonce: k.PrintThreadStackTraceCommand.GetNonce(), ThreadStackTrace: rmqPtr(stacks()),
				}},
			})
		case *rocketmqv2.TelemetryCommand_VerifyMessageCommand:
			// A producer consumes nothing to verify.
			t.send(&rocketmqv2.TelemetryCommand{
				Status: &rocketmqv2.Status{Code: rocketmqv2.Code_NOT_IMPLEMENTED},
				Command: &rocketmqv2.TelemetryCommand_VerifyMessageResult{VerifyMessageResult: &rocketmqv2.VerifyMessageResult{
					Nonce: k.VerifyMessageCommand.GetNonce(),
				}},
			})
		case *rocketmqv2.TelemetryCommand_RecoverOrphanedTransactionCommand:
			t.c.recoverOrphan(t.conn, k.RecoverOrphanedTransactionCommand) // check.go
		case *rocketmqv2.TelemetryCommand_ReconnectEndpointsCommand:
			return got, errReconnect
		case nil:
			if s := cmd.GetStatus(); s != nil && s.GetCode() != rocketmqv2.Code_OK {
				se := &senderr.StatusError{Code: int32(s.GetCode()), Message: s.GetMessage()}
				if refused, _ := authRefusal(se); refused {
					return got, se // the stream's end, kept as its error (auth.go)
				}
				t.mu.Lock()
				t.lastErr = se
				t.mu.Unlock()
			}
		}
	}
}

// errReconnect ends a stream whose server asked for a new one.
var errReconnect = rmqError("producer: rocketmq server asked to reconnect")

type rmqError string

func (e rmqError) Error() string { return string(e) }

// send writes cmd on the current stream, if there is one; a failed write
// ends the stream, which the session then reopens.
func (t *rmqTelemetry) send(cmd *rocketmqv2.TelemetryCommand) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stream == nil {
		return
	}
	if err := t.stream.Send(cmd); err != nil {
		t.c.logger.Debug("rocketmq: telemetry write failed", "endpoint", t.conn.addr, "err", err)
	}
}

// sendSettings writes the client's current Settings, as after a new topic.
func (t *rmqTelemetry) sendSettings() { t.send(t.c.settingsCommand()) }

// err is the error that ended the last stream, or a non-OK status the
// server wrote on it.
func (t *rmqTelemetry) err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastErr
}

// settingsCommand is the client's Settings: a producer of the topics it
// has routes for (the topics it sent to, less those dropped idle), with its
// access point, request timeout and user agent (made once, in
// newRMQClient). Its cost is one Resource per topic: the settings writer
// (settingsLoop) makes it at most once per gap, not once per new topic.
func (c *rmqClient) settingsCommand() *rocketmqv2.TelemetryCommand {
	c.mu.Lock()
	topics := make([]*rocketmqv2.Resource, 0, len(c.routes))
	for t := range c.routes {
		topics = append(topics, &rocketmqv2.Resource{ResourceNamespace: c.set.Namespace, Name: t})
	}
	c.mu.Unlock()
	return &rocketmqv2.TelemetryCommand{Command: &rocketmqv2.TelemetryCommand_Settings{Settings: &rocketmqv2.Settings{
		ClientType:     rmqPtr(rocketmqv2.ClientType_PRODUCER),
		AccessPoint:    c.accessPoint,
		RequestTimeout: durationpb.New(c.timeout),
		PubSub: &rocketmqv2.Settings_Publishing{Publishing: &rocketmqv2.Publishing{
			Topics:              topics,
			ValidateMessageType: true,
		}},
		UserAgent: c.ua,
	}}}
}

// userAgent is the client's UA in its Settings, made once: the hostname is
// read here and nowhere else.
func userAgent() *rocketmqv2.UA {
	host, _ := os.Hostname()
	return &rocketmqv2.UA{
		Language: rocketmqv2.Language_GOLANG,
		Version:  rmqClientVersion,
		Platform: runtime.GOOS + "/" + runtime.GOARCH + " " + runtime.Version(),
		Hostname: host,
	}
}

// settingsChanged tells the settings writer that the client's topics
// changed (a new topic, or idle ones dropped). It never blocks: signals
// that arrive before the writer's next write make one write.
func (c *rmqClient) settingsChanged() {
	select {
	case c.settingsDirty <- struct{}{}:
	default:
	}
}

// settingsLoop is the settings writer: after a change, it writes the
// client's latest Settings to every telemetry stream, at once when the
// last write is at least a gap old, else when it is; changes in between
// are coalesced into that one write. The gap is settingsEvery, or
// rmqSettingsPerTopic per topic when that is longer, so that writing
// Settings of n topics (O(n)) takes a bounded share of the client's time
// however many topics there are, and a burst of k new topics costs
// O(1) Settings writes, not k writes of O(n) each.
//
// Nothing waits for the write. A send does not need its topic in the
// server's Settings: the RocketMQ 5 proxy reads a producer's publishing
// topics to register it as the producer of each topic (the topic is its
// producer group) at Telemetry and at each Heartbeat, for the checks of
// its orphaned transactions, and SendMessage reads none of them
// (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/client/ClientActivity.java,
// heartbeat and processAndWriteClientSettings; producer/SendMessageActivity.java).
// The official Java client does not write Settings for a new topic either:
// it adds the topic to its set and writes Settings only to the endpoints a
// new route names for the first time
// (rocketmq-clients' java/client/src/main/java/org/apache/rocketmq/client/java/impl/producer/ProducerImpl.java
// send0, this.topics.add; impl/ClientImpl.java onTopicRouteDataFetched,
// syncSettings). A transaction's first check comes a minute or more after
// its half message; the gap is far shorter.
func (c *rmqClient) settingsLoop() {
	defer c.wg.Done()
	var last time.Time
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.settingsDirty:
		}
		c.mu.Lock()
		n := len(c.routes)
		c.mu.Unlock()
		gap := max(c.settingsEvery, time.Duration(n)*rmqSettingsPerTopic)
		if wait := time.Until(last.Add(gap)); wait > 0 {
			tm := time.NewTimer(wait)
			select {
			case <-c.ctx.Done():
				tm.Stop()
				return
			case <-tm.C:
			}
		}
		select { // the Settings made below include the changes signalled so far
		case <-c.settingsDirty:
		default:
		}
		last = time.Now()
		cmd := c.settingsCommand()
		c.settingsWrites.Add(1)
		for _, cn := range c.connList() {
			cn.tel.send(cmd)
		}
	}
}

// stacks is every goroutine's stack, at most 64 KiB of it.
func stacks() string {
	b := make([]byte, 64<<10)
	return string(b[:runtime.Stack(b, true)])
}

func rmqPtr[T any](v T) *T { return &v }
