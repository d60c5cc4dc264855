package main

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/rocketry-go/rocketry/internal/interop/goclient/kit"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
)

// summary is the JSON the program prints; its fields are those of
// produce.js's summary, so that one Go type reads both.
type summary struct {
	Client        clientInfo       `json:"client"`
	Error         string           `json:"error,omitempty"`
	StartupMs     float64          `json:"startupMs"`
	SendMs        float64          `json:"sendMs"`
	TotalMs       float64          `json:"totalMs"`
	Settings      []settingsSeen   `json:"settings"`
	StartupError  *kit.ClientError `json:"startupError,omitempty"`
	ShutdownError *kit.ClientError `json:"shutdownError,omitempty"`
	Sent          int              `json:"sent"`
	Failed        int              `json:"failed"`
	SendRequests  int              `json:"sendRequests"`
	Messages      []message        `json:"messages"`
}

type clientInfo struct {
	Package string `json:"package"`
	Version string `json:"version"`
}

// settingsSeen is a Settings command the broker pushed on Telemetry, as
// protojson.
type settingsSeen struct {
	AtMs      float64         `json:"atMs"`
	Endpoints string          `json:"endpoints"`
	Settings  json.RawMessage `json:"settings"`
}

// message is one message: sent with a receipt, or failed with the error
// Send returned, and each SendMessage call that carried it.
type message struct {
	Index     int              `json:"index"`
	Key       string           `json:"key"`
	MessageID string           `json:"messageId"`
	OK        bool             `json:"ok"`
	Receipt   *receipt         `json:"receipt,omitempty"`
	Error     *kit.ClientError `json:"error,omitempty"`
	ElapsedMs float64          `json:"elapsedMs"`
	Attempts  []*attempt       `json:"attempts"`
}

type receipt struct {
	MessageID string `json:"messageId"`
	Offset    int64  `json:"offset"`
}

// attempt is one SendMessage call: answered with the response's top-level
// status code (the only one the client reads) or failed with an error.
type attempt struct {
	AtMs       float64          `json:"atMs"`
	DurationMs float64          `json:"durationMs"`
	Endpoints  string           `json:"endpoints"`
	Batch      int              `json:"batch"`
	Code       int              `json:"code,omitempty"`
	Entries    []int            `json:"entryCodes,omitempty"`
	Error      *kit.ClientError `json:"error,omitempty"`
}

// recorder records what the client's connections carry: every SendMessage
// call, by message id, and every Settings command the broker pushes. It is
// safe for concurrent use.
type recorder struct {
	start time.Time

	settled chan struct{} // closed on the first Settings

	mu       sync.Mutex
	attempts map[string][]*attempt // by message id, in the order made
	keyToID  map[string]string
	settings []settingsSeen
}

func newRecorder(start time.Time) *recorder {
	return &recorder{start: start, settled: make(chan struct{}), attempts: map[string][]*attempt{}, keyToID: map[string]string{}}
}

func (r *recorder) ms(t time.Time) float64 { return float64(t.Sub(r.start).Microseconds()) / 1000 }

// unary records SendMessage calls.
func (r *recorder) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	sreq, ok := req.(*v2.SendMessageRequest)
	if !ok {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	begin := time.Now()
	err := invoker(ctx, method, req, reply, cc, opts...)
	a := &attempt{
		AtMs:       r.ms(begin),
		DurationMs: float64(time.Since(begin).Microseconds()) / 1000,
		Endpoints:  cc.Target(),
		Batch:      len(sreq.GetMessages()),
	}
	if err != nil {
		a.Error = kit.Describe(err)
	} else if resp, ok := reply.(*v2.SendMessageResponse); ok {
		a.Code = int(resp.GetStatus().GetCode())
		for _, e := range resp.GetEntries() {
			a.Entries = append(a.Entries, int(e.GetStatus().GetCode()))
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range sreq.GetMessages() {
		id := m.GetSystemProperties().GetMessageId()
		for _, k := range m.GetSystemProperties().GetKeys() {
			r.keyToID[k] = id
		}
		r.attempts[id] = append(r.attempts[id], a)
	}
	return err
}

// stream records the Settings commands received on Telemetry streams.
func (r *recorder) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return cs, err
	}
	return &telemetryStream{ClientStream: cs, r: r, target: cc.Target()}, nil
}

type telemetryStream struct {
	grpc.ClientStream
	r      *recorder
	target string
}

func (s *telemetryStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if c, ok := m.(*v2.TelemetryCommand); ok && err == nil && c.GetSettings() != nil {
		b, merr := protojson.Marshal(c.GetSettings())
		if merr != nil {
			b, _ = json.Marshal(merr.Error())
		}
		s.r.mu.Lock()
		if len(s.r.settings) == 0 {
			close(s.r.settled)
		}
		s.r.settings = append(s.r.settings, settingsSeen{AtMs: s.r.ms(time.Now()), Endpoints: s.target, Settings: b})
		s.r.mu.Unlock()
	}
	return err
}

// snapshot returns the attempts by message id, the message ids by key and
// the Settings seen so far.
func (r *recorder) snapshot() (map[string][]*attempt, map[string]string, []settingsSeen) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts, r.keyToID, append([]settingsSeen(nil), r.settings...)
}
