package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/backoff"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/producer"
)

// Names of the contenders.
const (
	Raw            = "raw"
	RawTimeout     = "raw-timeout"
	Rocketry       = "rocketry"
	Interceptor    = "interceptor"
	Middleware     = "middleware"
	ServiceConfig  = "serviceconfig"
	NaiveImmediate = "naive-immediate"
	NaiveSleep     = "naive-sleep"
	// RocketryNoHint is rocketry with the broker's RetryInfo hints removed
	// from its answers (a diagnostic: it shows what the hints cost or gain).
	RocketryNoHint = "rocketry-nohint"
)

// FastPath lists the contenders of the fast-path benchmarks, the floor
// first, then the floor with a 3 s per-call timeout (what careful code adds,
// and what rocketry's attempt timeout costs).
var FastPath = []string{Raw, RawTimeout, Rocketry, Interceptor, Middleware, ServiceConfig}

// Scenario lists the contenders of the throttling scenario.
var ScenarioContenders = []string{Rocketry, Middleware, ServiceConfig, NaiveImmediate, NaiveSleep}

// Diagnostic lists contenders the scenario knows besides ScenarioContenders.
var Diagnostic = []string{RocketryNoHint}

// Sender sends one message at a time; it is safe for concurrent use.
type Sender interface {
	// Send sends one message of topic with id and body, retrying as the
	// contender does, and returns when it is stored (nil) or failed for good.
	Send(ctx context.Context, id string, body []byte) error
	// Close releases the connection.
	Close() error
}

// Settings are what a contender is built with.
type Settings struct {
	// Topic is the topic every message goes to.
	Topic string
	// Scaled, for the scenario, makes rocketry's throttle schedule the gRPC
	// connection backoff scaled by Scale (see ScaledConnection), with
	// MaxAttempts attempts; the zero value is rocketry's defaults.
	Scaled      bool
	Scale       float64
	MaxAttempts int
	// Rand is rocketry's jitter source (nil: the producer's default).
	Rand backoff.Rand
	// Observer is given to rocketry (nil: none).
	Observer producer.Observer
	// NaiveSleep is the fixed sleep of naive-sleep.
	NaiveSleep time.Duration
}

// Middleware's recommended settings (its README and examples):
// RESOURCE_EXHAUSTED and UNAVAILABLE, 3 attempts, exponential backoff
// from 100 ms.
func middlewareInterceptor() grpc.UnaryClientInterceptor {
	return retry.UnaryClientInterceptor(
		retry.WithCodes(codes.Unavailable, codes.ResourceExhausted),
		retry.WithMax(3),
		retry.WithBackoff(retry.BackoffExponential(100*time.Millisecond)),
	)
}

// ServiceConfigJSON is grpc-go's retry for MessagingService: 3 attempts
// (the first counted), backoff from 0.1 s doubling up to 1 s (grpc-go draws
// each wait uniformly in [0, backoff)), on UNAVAILABLE and RESOURCE_EXHAUSTED.
const ServiceConfigJSON = `{"methodConfig":[{"name":[{"service":"rocketry.v1.MessagingService"}],` +
	`"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,` +
	`"retryableStatusCodes":["UNAVAILABLE","RESOURCE_EXHAUSTED"]}}]}`

// ScaledConnection returns the gRPC connection backoff with its times
// multiplied by scale (0.01: 1 s -> 10 ms, 120 s -> 1.2 s, 20 s -> 200 ms).
func ScaledConnection(scale float64) backoff.Config {
	c := backoff.DefaultConfig
	mul := func(d time.Duration) time.Duration { return time.Duration(float64(d) * scale) }
	c.BaseDelay, c.MaxDelay, c.MinConnectTimeout = mul(c.BaseDelay), mul(c.MaxDelay), mul(c.MinConnectTimeout)
	return c
}

// New builds the contender name on the broker at addr.
func New(name, addr string, s Settings) (Sender, error) {
	if s.Topic == "" {
		s.Topic = "bench"
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	switch name {
	case Raw, RawTimeout, NaiveImmediate, NaiveSleep:
	case Interceptor:
		dial = append(dial, grpc.WithUnaryInterceptor(producer.UnaryClientInterceptor()))
	case Middleware:
		dial = append(dial, grpc.WithUnaryInterceptor(middlewareInterceptor()))
	case ServiceConfig:
		dial = append(dial, grpc.WithDefaultServiceConfig(ServiceConfigJSON))
	case Rocketry, RocketryNoHint:
		opts := []producer.Option{producer.WithMaxInFlight(1 << 20)}
		if name == RocketryNoHint {
			opts = append(opts, producer.WithDialOptions(grpc.WithUnaryInterceptor(dropRetryInfo)))
		}
		if s.Scaled {
			sched, err := backoff.NewConnection(ScaledConnection(s.Scale))
			if err != nil {
				return nil, fmt.Errorf("bench: rocketry: %w", err)
			}
			opts = append(opts, producer.WithThrottleSchedule(sched))
			if s.MaxAttempts > 0 {
				opts = append(opts, producer.WithMaxAttempts(s.MaxAttempts))
			}
		}
		if s.Rand != nil {
			opts = append(opts, producer.WithRand(s.Rand))
		}
		if s.Observer != nil {
			opts = append(opts, producer.WithObserver(s.Observer))
		}
		p, err := producer.New(addr, append([]producer.Option{producer.WithProtocol(producer.RocketryV1)}, opts...)...)
		if err != nil {
			return nil, err
		}
		return &rocketrySender{p: p, topic: s.Topic}, nil
	default:
		return nil, fmt.Errorf("bench: unknown contender %q (known: %s)", name, strings.Join(append(append([]string(nil), FastPath...), NaiveImmediate, NaiveSleep), ", "))
	}
	cc, err := grpc.NewClient(addr, dial...)
	if err != nil {
		return nil, err
	}
	rs := &rawSender{cc: cc, client: rocketryv1.NewMessagingServiceClient(cc), topic: s.Topic}
	switch name {
	case RawTimeout:
		return &timeoutSender{rawSender: rs, timeout: producer.DefaultAttemptTimeout}, nil
	case NaiveImmediate:
		return &naiveSender{rawSender: rs}, nil
	case NaiveSleep:
		d := s.NaiveSleep
		if d <= 0 {
			d = 100 * time.Millisecond
		}
		return &naiveSender{rawSender: rs, sleep: d}, nil
	}
	return rs, nil
}

// dropRetryInfo removes google.rpc.RetryInfo from the details of an error
// status.
func dropRetryInfo(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return err
	}
	p := st.Proto()
	kept := p.Details[:0:0]
	for _, d := range p.Details {
		if !d.MessageIs((*errdetails.RetryInfo)(nil)) {
			kept = append(kept, d)
		}
	}
	p.Details = kept
	return status.FromProto(p).Err()
}

// rawSender is the generated client (with whatever interceptor or service
// config its connection has).
type rawSender struct {
	cc     *grpc.ClientConn
	client rocketryv1.MessagingServiceClient
	topic  string
}

func (r *rawSender) Send(ctx context.Context, id string, body []byte) error {
	_, err := r.client.SendMessage(ctx, &rocketryv1.SendMessageRequest{Messages: []*rocketryv1.Message{{MessageId: id, Topic: r.topic, Body: body}}})
	return err
}

func (r *rawSender) Close() error { return r.cc.Close() }

// timeoutSender is the raw client with a timeout per call.
type timeoutSender struct {
	*rawSender
	timeout time.Duration
}

func (t *timeoutSender) Send(ctx context.Context, id string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	return t.rawSender.Send(ctx, id, body)
}

// naiveSender retries every error until ctx ends: at once, or after a
// fixed sleep.
type naiveSender struct {
	*rawSender
	sleep time.Duration
}

func (n *naiveSender) Send(ctx context.Context, id string, body []byte) error {
	for {
		err := n.rawSender.Send(ctx, id, body)
		if err == nil || ctx.Err() != nil {
			return err
		}
		if n.sleep > 0 {
			t := time.NewTimer(n.sleep)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return err
			}
		}
	}
}

// rocketrySender is producer.Producer.Send.
type rocketrySender struct {
	p     *producer.Producer
	topic string
}

func (r *rocketrySender) Send(ctx context.Context, id string, body []byte) error {
	_, err := r.p.Send(ctx, &producer.Message{ID: id, Topic: r.topic, Body: body})
	return err
}

func (r *rocketrySender) Close() error { return r.p.Close(context.Background()) }

// asyncSender is producer.Producer.SendAsync, waiting for its callback.
type asyncSender struct{ rocketrySender }

func (a *asyncSender) Send(ctx context.Context, id string, body []byte) error {
	done := make(chan error, 1)
	if err := a.p.SendAsync(ctx, &producer.Message{ID: id, Topic: a.topic, Body: body}, func(_ *producer.SendReceipt, err error) { done <- err }); err != nil {
		return err
	}
	return <-done
}

// Producer returns the rocketry contender's producer, for SendAsync.
func Producer(s Sender) (*producer.Producer, bool) {
	r, ok := s.(*rocketrySender)
	if !ok {
		return nil, false
	}
	return r.p, true
}

// IDs makes message IDs: a prefix and a counter, one small allocation each,
// as producer's own generator does.
type IDs struct {
	prefix string
	n      atomic.Uint64
}

// NewIDs returns a generator of IDs starting with prefix.
func NewIDs(prefix string) *IDs { return &IDs{prefix: prefix + "-"} }

// Next returns a new ID.
func (g *IDs) Next() string {
	var buf [40]byte
	out := append(buf[:0], g.prefix...)
	out = strconv.AppendUint(out, g.n.Add(1), 36)
	return string(out)
}

// errUnknown is returned by Parse for a name it does not know.
var errUnknown = errors.New("bench: unknown contender")

// ParseList splits a comma-separated list of contender names and checks
// each against known.
func ParseList(list string, known []string) ([]string, error) {
	var out []string
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		found := false
		for _, k := range known {
			if k == n {
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("%w %q (known: %s)", errUnknown, n, strings.Join(known, ", "))
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bench: no contender in %q", list)
	}
	return out, nil
}
