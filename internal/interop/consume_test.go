package interop_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
)

// TestOfficialNodeSimpleConsumer sends FIFO groups and timed messages with
// the official Node.js client's Producer and reads them back with its
// SimpleConsumer, from the bundled broker with one topic declared FIFO and
// one DELAY. The consumer leaves the first delivery of every seventh
// message unacknowledged, so that it comes back after its invisible time.
// From the consumer's own log it checks (checkConsumed): every message sent is
// acknowledged exactly once; each group's messages are acknowledged in
// send order, and none is delivered before the group's previous message
// was acknowledged; a message is delivered again only when its previous
// delivery was not acknowledged, with delivery_attempt one higher; no
// timed message is received before its delivery time.
func TestOfficialNodeSimpleConsumer(t *testing.T) {
	const (
		fifoTopic  = "interop-fifo"
		timedTopic = "interop-timed"
		groups     = 4
		perGroup   = 20
		timed      = 5
	)
	nodeModules := installClient(t)
	for run := 1; ; run++ {
		b := brokertest.Start(t,
			broker.WithTopicType(fifoTopic, broker.TopicFIFO),
			broker.WithTopicType(timedTopic, broker.TopicDelay),
			broker.WithLongPolling(100*time.Millisecond, 2*time.Second),
			broker.WithMinInvisibleDuration(500*time.Millisecond),
		)
		argv, env := nodeArgv(t, nodeModules, "consume.js",
			"--endpoint", b.Addr(), "--fifo-topic", fifoTopic, "--timed-topic", timedTopic,
			"--groups", strconv.Itoa(groups), "--per-group", strconv.Itoa(perGroup), "--timed", strconv.Itoa(timed),
			"--timed-delay-ms", "1500", "--invisible-ms", "1000", "--await-ms", "200", "--skip-ack-every", "7")
		var s consumeSummary
		stderr, err := runProgramErr(t, "node consume.js", nodeTimeout, argv, env, &s)
		if err != nil && s.Stuck != "" && run == 1 {
			// The client once never returned from a call with every suite
			// running beside it on 2 CPUs (no output, killed at the
			// timeout); consume.js's watchdog names the step. Once, on a
			// fresh broker, it is run again; twice is a failure.
			t.Logf("consume.js stuck in %q: run again on a fresh broker\n%v", s.Stuck, err)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("client %s %s: sent %d, %d events, %d lines on stderr", s.Client.Package, s.Client.Version, len(s.Sent), len(s.Events), strings.Count(stderr, "\n"))
		checkConsumed(t, b, s, groups, perGroup, timed)
		return
	}
}

// consumeSummary is consume.js's JSON summary.
type consumeSummary struct {
	Client struct {
		Package string `json:"package"`
		Version string `json:"version"`
	} `json:"client"`
	Error        string       `json:"error"`
	StartupError *clientError `json:"startupError"`
	// Stuck names the step consume.js's watchdog found unfinished.
	Stuck         string          `json:"stuck"`
	ShutdownError *clientError    `json:"shutdownError"`
	Sent          []sentMessage   `json:"sent"`
	SendErrors    json.RawMessage `json:"sendErrors"`
	ReceiveErrors []clientError   `json:"receiveErrors"`
	Events        []event         `json:"events"`
}

func (s consumeSummary) sendErrors() string {
	if len(s.SendErrors) == 0 || string(s.SendErrors) == "[]" {
		return ""
	}
	return string(s.SendErrors)
}

// sentMessage is a message consume.js sent.
type sentMessage struct {
	Kind        string `json:"kind"` // fifo or timed
	Group       string `json:"group"`
	Seq         int    `json:"seq"`
	MessageID   string `json:"messageId"`
	DeliverAtMs int64  `json:"deliverAtMs"`
}

// event is a delivery ("receive"), an acknowledgement ("ack") or a failed
// one ("ackError"), numbered in the order the script saw them.
type event struct {
	Seq                 int          `json:"seq"`
	Kind                string       `json:"kind"`
	AtMs                int64        `json:"atMs"`
	MessageID           string       `json:"messageId"`
	Group               string       `json:"group"`
	Attempt             int          `json:"attempt"`
	DeliveryTimestampMs *int64       `json:"deliveryTimestampMs"`
	Corrupted           bool         `json:"corrupted"`
	SkippedAck          bool         `json:"skippedAck"`
	Error               *clientError `json:"error"`
}
