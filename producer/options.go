package producer

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	mathrand "math/rand/v2"
	"reflect"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"

	"github.com/rocketry-go/rocketry/producer/internal/send"
)

// Defaults of the options.
const (
	// DefaultMaxAttempts is the number of attempts of a send, counting the
	// first (RocketMQ's default): one attempt and at most two retries.
	DefaultMaxAttempts = 3
	// DefaultAttemptTimeout is the time each attempt is given.
	DefaultAttemptTimeout = 3 * time.Second
	// DefaultMaxInFlight is the number of async sends in flight at once.
	DefaultMaxInFlight = 1024
)

// Where an option may be used.
type scope uint8

const (
	scopeNew         scope = 1 << iota // New
	scopeFromConn                      // NewFromConn
	scopeInterceptor                   // NewUnaryClientInterceptor, UnaryClientInterceptor
	scopeCall                          // WithCallOptions

	scopeProducer = scopeNew | scopeFromConn
	scopeAll      = scopeProducer | scopeInterceptor | scopeCall
)

// An Option configures a Producer (New, NewFromConn), an interceptor
// (UnaryClientInterceptor) or one call through it (WithCallOptions). Each
// option's comment says where it applies, in one of these words: "Applies
// everywhere", "Applies to New only" (NewFromConn's connection is made and
// speaks rocketry.v1, so WithDialOptions, WithResolvers, WithProtocol and
// the RocketMQ 5 options are New's), "Applies to New and NewFromConn",
// "Applies to New, NewFromConn and the interceptor, not per call", or
// "Applies to the interceptor and per call". Using one elsewhere is an
// *OptionError that names it.
type Option interface {
	apply(*config) error
	scope() scope
	name() string
}

type option struct {
	n  string
	sc scope
	f  func(*config) error
}

func (o option) apply(c *config) error { return o.f(c) }
func (o option) scope() scope          { return o.sc }
func (o option) name() string          { return o.n }

// config is the whole configuration; defaultConfig gives its defaults and
// finish checks what spans options.
type config struct {
	// The retry policy the executor reads (producer/internal/send): the
	// attempts, their timeout, the schedules and their Rand, WithLogger's
	// logger, WithWaitForReady, WithFailoverOnUnknownOutcome; and, built
	// by build, the rate limiter, the retry budget and the events.
	send.Config

	rateLimit   float64 // per second; 0: none
	rateBurst   int
	maxInFlight int
	sink        DeadLetterSink // WithDeadLetterSink, WithFallback
	sinkAfter   bool           // sink is a fallback: run after the send leaves the core (handOff)
	observer    Observer
	hook        Hook
	budgetMax   float64 // 0: no budget
	budgetRatio float64
	maxBody     int
	dialOpts    []grpc.DialOption
	resolvers   []resolver.Builder // WithResolvers: resolved in producer/internal/wire/v1
	classifier  Classifier
	attemptsSet bool // WithMaxAttempts was given
	pacing      bool // pace endpoints that throttle without a hint
	protocol    Protocol
	rmq         rmqSettings // apache.rocketmq.v2: see rocketmq_options.go
	batch       batchConfig // async first attempts: see batch.go
	batchSet    bool        // WithBatching was given (RocketMQ5 batches only then)
}

var discardLogger = slog.New(slog.DiscardHandler)

func defaultConfig() config {
	return config{
		Config: send.Config{
			MaxAttempts:    DefaultMaxAttempts,
			AttemptTimeout: DefaultAttemptTimeout,
			Throttle:       defaultThrottle,
			Failure:        backoff.Immediate,
			Rand:           globalRand{},
			Logger:         discardLogger,
			Closed:         ErrClosed,
		},
		maxInFlight: DefaultMaxInFlight,
		maxBody:     DefaultMaxBodyBytes,
		classifier:  autoClassifier{},
		pacing:      true,
		batch:       defaultBatchConfig,
	}
}

// defaultThrottle is the gRPC connection backoff with its default
// parameters.
var defaultThrottle backoff.Schedule = func() backoff.Schedule {
	c, err := backoff.NewConnection(backoff.DefaultConfig)
	if err != nil {
		panic(err) // DefaultConfig is valid
	}
	return c
}()

// build applies opts allowed in sc to the defaults and finishes the config.
func build(sc scope, where string, opts []Option) (config, error) {
	c := defaultConfig()
	if sc == scopeNew {
		c.protocol = RocketMQ5 // what our users' brokers speak; NewFromConn speaks rocketry.v1
	}
	if err := c.applyAll(sc, where, opts); err != nil {
		return config{}, err
	}
	if err := c.checkSink(where); err != nil {
		return config{}, err
	}
	c.settleAttempts()
	if c.protocol == RocketMQ5 && !c.batchSet {
		c.batch = batchConfig{} // see WithBatching: a proxy's batch is stored with its first message's properties
	}
	if err := c.checkProtocol(where); err != nil {
		return config{}, err
	}
	if c.rateLimit > 0 {
		c.Limiter = rate.NewLimiter(rate.Limit(c.rateLimit), c.rateBurst)
	}
	if c.budgetMax > 0 {
		c.Budget = send.NewBudget(c.budgetMax, c.budgetRatio)
	}
	c.events()
	return c, nil
}

// settleAttempts applies the rule that joins a schedule's length to
// MaxAttempts: a throttle schedule that knows its length (backoff.Bounded,
// such as an SNS delivery policy with N retries) sets MaxAttempts to N+1,
// unless WithMaxAttempts was given, which then wins.
func (c *config) settleAttempts() {
	if c.attemptsSet {
		return
	}
	if b, ok := c.Throttle.(backoff.Bounded); ok && b.Retries() >= 0 {
		c.MaxAttempts = b.Retries() + 1
	}
}

func (c *config) applyAll(sc scope, where string, opts []Option) error {
	for _, o := range opts {
		if o == nil {
			continue
		}
		if o.scope()&sc == 0 {
			return &OptionError{Option: o.name(), Where: where, Reason: "does not apply to"}
		}
		if err := o.apply(c); err != nil {
			var oe *OptionError
			if errors.As(err, &oe) {
				oe.Option, oe.Where = o.name(), where
			}
			return err
		}
	}
	return nil
}

// invalid is an option's error; applyAll names the option.
func invalid(value, reason string) error {
	return &OptionError{Value: value, Reason: reason}
}

// WithMaxAttempts sets the number of attempts of a send, counting the first,
// overriding the default of 3: n attempts are at most n-1 retries. n must be
// >= 1; 1 means no retry. Without it, a throttle schedule that knows its
// length (an SNS delivery policy of N retries) sets the attempts to N+1;
// with it, n wins and the schedule's later retries are never reached.
// Applies everywhere.
func WithMaxAttempts(n int) Option {
	return option{"WithMaxAttempts", scopeAll, func(c *config) error {
		if n < 1 {
			return invalid(fmt.Sprintf("%d", n), "must be >= 1")
		}
		c.MaxAttempts, c.attemptsSet = n, true
		return nil
	}}
}

// WithAttemptTimeout sets the time each attempt is given, overriding the
// default of 3 s; d must be > 0. The caller's context bounds the whole send.
// After a throttle on the gRPC connection backoff (a schedule that is a
// backoff.AttemptFloor), the next attempt is given what the algorithm
// gives a try: until its next backoff would end, and at least
// MinConnectTimeout (20 s), or d if that is longer. Applies everywhere.
//
// The timeout is the deadline of the attempt's context, so the server
// receives it as grpc-timeout and can drop work whose caller has gone; a
// caller's deadline sooner than it is the attempt's. Under a caller's
// context that cannot be cancelled (context.Background), attempts whose
// deadlines fall within the same 10 ms share one context and one timer, so
// an attempt's deadline of 1 s or more may come up to 10 ms sooner than d.
func WithAttemptTimeout(d time.Duration) Option {
	return option{"WithAttemptTimeout", scopeAll, func(c *config) error {
		if d <= 0 {
			return invalid(fmt.Sprintf("%v", d), "must be > 0")
		}
		c.AttemptTimeout = d
		return nil
	}}
}

// WithThrottleSchedule sets the wait before a retry after a throttling
// answer (530 TOO_MANY_REQUESTS, RESOURCE_EXHAUSTED), overriding the default
// of the gRPC connection backoff (backoff.DefaultConfig: 1 s, x1.6, +/-20%,
// at most 120 s, at least 20 s per attempt). Retry n of this schedule is the
// n-th throttled attempt of the send. s must not be nil. Applies everywhere.
func WithThrottleSchedule(s backoff.Schedule) Option {
	return option{"WithThrottleSchedule", scopeAll, func(c *config) error {
		if err := checkSchedule(s); err != nil {
			return err
		}
		c.Throttle = s
		return nil
	}}
}

// WithFailureSchedule sets the wait before a retry after a failure (an
// attempt's timeout, a lost connection, UNAVAILABLE, INTERNAL), overriding
// the default of backoff.Immediate (no wait: the retry goes at once, to
// the next endpoint when the outcome is known to be "not stored", see
// WithFailoverOnUnknownOutcome). Retry n of this schedule is the n-th failed attempt of
// the send. s must not be nil. Applies everywhere.
func WithFailureSchedule(s backoff.Schedule) Option {
	return option{"WithFailureSchedule", scopeAll, func(c *config) error {
		if err := checkSchedule(s); err != nil {
			return err
		}
		c.Failure = s
		return nil
	}}
}

// checkSchedule refuses a nil schedule (a nil interface, or a nil pointer
// in one: (*backoff.DeliveryPolicy)(nil)) and one whose parameters do not
// validate (the zero backoff.Connection, not made by NewConnection).
func checkSchedule(s backoff.Schedule) error {
	if s == nil {
		return invalid("nil", "must not be nil")
	}
	if v := reflect.ValueOf(s); v.Kind() == reflect.Pointer && v.IsNil() {
		return invalid(fmt.Sprintf("%T(nil)", s), "must not be nil")
	}
	if c, ok := s.(interface{ Config() backoff.Config }); ok {
		if err := c.Config().Validate(); err != nil {
			return invalid(fmt.Sprintf("%T", s), err.Error()+" (make it with backoff.NewConnection)")
		}
	}
	return nil
}

// WithFailoverOnUnknownOutcome makes a retry after an unknown outcome (the
// attempt's timeout, a connection lost after the request left, UNAVAILABLE
// or INTERNAL without the broker's word that nothing was stored) go to the
// next endpoint, as the RocketMQ clients do. By default such a retry stays
// on the same endpoint, whose store recognises the message ID, so that a
// retry never stores a message twice; a retry after a known "not stored"
// (the request never left the client, or the broker's 500/503 detail) goes
// to the next endpoint either way. Set it to trade that guarantee for
// availability when brokers are independent and one may hang. Applies to
// New and NewFromConn.
func WithFailoverOnUnknownOutcome() Option {
	return option{"WithFailoverOnUnknownOutcome", scopeProducer, func(c *config) error {
		c.FailoverAlways = true
		return nil
	}}
}

// WithRateLimit limits attempts (first ones and retries) to perSecond on
// average with bursts of burst, with golang.org/x/time/rate; the default is
// no limit. perSecond must be > 0 and finite, burst >= 1. A wait for the
// limiter that would end after the caller's deadline fails the send at once
// (ErrDeadlineTooShort). Applies to New, NewFromConn and the interceptor,
// not per call.
func WithRateLimit(perSecond float64, burst int) Option {
	return option{"WithRateLimit", scopeProducer | scopeInterceptor, func(c *config) error {
		if !(perSecond > 0) || math.IsInf(perSecond, 0) {
			return invalid(fmt.Sprintf("%v, %d", perSecond, burst), "perSecond must be > 0 and finite")
		}
		if burst < 1 {
			return invalid(fmt.Sprintf("%v, %d", perSecond, burst), "burst must be >= 1")
		}
		c.rateLimit, c.rateBurst = perSecond, burst
		return nil
	}}
}

// WithRand sets the source of the schedules' jitter, overriding the default
// of math/rand/v2's top-level generator. nil means no jitter, so delays are exactly the schedule's nominal
// ones. r must be safe for concurrent use when sends run concurrently.
// Applies everywhere.
func WithRand(r backoff.Rand) Option {
	return option{"WithRand", scopeAll, func(c *config) error {
		c.Rand = r
		return nil
	}}
}

// WithMaxInFlight sets the number of async sends in flight at once,
// overriding the default of 1024; n must be >= 1. SendAsync waits for room
// beyond it and TrySendAsync fails with ErrBufferFull. Applies to New and
// NewFromConn.
func WithMaxInFlight(n int) Option {
	return option{"WithMaxInFlight", scopeProducer, func(c *config) error {
		if n < 1 {
			return invalid(fmt.Sprintf("%d", n), "must be >= 1")
		}
		c.maxInFlight = n
		return nil
	}}
}

// WithObserver sets a function called on every event of every send
// (attempt, success, retry with its delay and why, throttle, exhaustion,
// dead letter); the default is none, which costs nothing. o runs on the
// sending goroutine, must be safe for concurrent use, and must not block.
// Applies everywhere.
func WithObserver(o Observer) Option {
	return option{"WithObserver", scopeAll, func(c *config) error {
		c.observer = o
		return nil
	}}
}

// WithHook sets a Hook that follows every send from its start to its end
// with the send's context, and may add properties to the outgoing message
// (a trace context); the default is none, which costs nothing. h must not
// be nil. Applies to New and NewFromConn.
func WithHook(h Hook) Option {
	return option{"WithHook", scopeProducer, func(c *config) error {
		if h == nil {
			return invalid("nil", "must not be nil")
		}
		c.hook = h
		return nil
	}}
}

// WithRetryBudget sets a retry budget, the token bucket of gRPC's retry
// throttling: it holds maxTokens tokens at first; every failed or throttled
// attempt takes one, every success gives back tokenRatio (up to maxTokens),
// and retries are allowed only while more than maxTokens/2 are left. The
// default is no budget. maxTokens must be in (0, 1000] and tokenRatio in
// (0, 1]. The bucket is shared by all sends of a Producer or interceptor.
// Applies to New, NewFromConn and the interceptor, not per call.
func WithRetryBudget(maxTokens, tokenRatio float64) Option {
	return option{"WithRetryBudget", scopeProducer | scopeInterceptor, func(c *config) error {
		if !(maxTokens > 0 && maxTokens <= 1000) {
			return invalid(fmt.Sprintf("%v, %v", maxTokens, tokenRatio), "maxTokens must be in (0, 1000]")
		}
		if !(tokenRatio > 0 && tokenRatio <= 1) {
			return invalid(fmt.Sprintf("%v, %v", maxTokens, tokenRatio), "tokenRatio must be in (0, 1]")
		}
		c.budgetMax, c.budgetRatio = maxTokens, tokenRatio
		return nil
	}}
}

// WithMaxBodyBytes sets the largest body a message may have, overriding the
// default of DefaultMaxBodyBytes (4 MiB); n must be >= 0. A larger body
// fails validation (ErrInvalidMessage) without any attempt. Applies to New
// and NewFromConn.
func WithMaxBodyBytes(n int) Option {
	return option{"WithMaxBodyBytes", scopeProducer, func(c *config) error {
		if n < 0 {
			return invalid(fmt.Sprintf("%d", n), "must be >= 0")
		}
		c.maxBody = n
		return nil
	}}
}

// WithLogger sets the logger, overriding the default that discards: retries
// are logged at debug level, dead letters at warn level, failures of the
// dead-letter sink at error level. l must not be nil. Applies everywhere.
func WithLogger(l *slog.Logger) Option {
	return option{"WithLogger", scopeAll, func(c *config) error {
		if l == nil {
			return invalid("nil", "must not be nil")
		}
		c.Logger = l
		return nil
	}}
}

// WithDialOptions adds options to the dial of each endpoint by New, after
// the default insecure transport credentials (so a later
// grpc.WithTransportCredentials replaces them). Applies to New only:
// NewFromConn refuses it, since its connection is already made.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return option{"WithDialOptions", scopeNew, func(c *config) error {
		for i, o := range opts {
			if o == nil {
				return invalid(fmt.Sprintf("option %d of %d is nil", i+1, len(opts)), "must not be nil")
			}
		}
		c.dialOpts = append(c.dialOpts, opts...)
		return nil
	}}
}

// globalRand is the default jitter source: math/rand/v2's top-level
// generator, safe for concurrent use.
type globalRand struct{}

func (globalRand) Float64() float64 { return mathrand.Float64() }

// WithDeliveryPolicy sets the throttle schedule to an SNS delivery policy
// (as WithThrottleSchedule(p)); when its MaxReceivesPerSecond is > 0 it also
// limits attempts to that rate, with a burst of 1 (as WithRateLimit). The
// policy's retries set the attempts (its NumRetries + 1) unless
// WithMaxAttempts is given. p must not be nil. Applies to New, NewFromConn
// and the interceptor, not per call.
func WithDeliveryPolicy(p *backoff.DeliveryPolicy) Option {
	return option{"WithDeliveryPolicy", scopeProducer | scopeInterceptor, func(c *config) error {
		if p == nil {
			return invalid("nil", "must not be nil")
		}
		c.Throttle = p
		if r := p.MaxReceivesPerSecond(); r > 0 {
			c.rateLimit, c.rateBurst = r, 1
		}
		return nil
	}}
}

// WithClassifier sets how an attempt's reply or error is read, overriding
// the default: a reply of apache.rocketmq.v2's SendMessageResponse is read
// by RocketMQClassifier, anything else by GRPCClassifier. Give one for a
// service whose status is in the response body. c must not be nil. Applies
// to the interceptor and per call. A call whose request never left the
// client because the connection failed (refused, unknown host, not a gRPC
// server) is FailedNotStored with a *ConnectError whatever c says.
func WithClassifier(c Classifier) Option {
	return option{"WithClassifier", scopeInterceptor | scopeCall, func(cfg *config) error {
		if c == nil {
			return invalid("nil", "must not be nil")
		}
		cfg.classifier = c
		return nil
	}}
}

// WithPacing sets whether what a broker throttles without a hint is paced,
// overriding the default of true. Paced, once refusals are a sustained
// share of the attempts of a topic on an endpoint (not one message in ten
// refused for its own reasons), the first attempts and the retries after a
// throttle of that topic there wait their turn at a rate that follows what
// the broker accepts: cut to 0.7 of the rate that was getting through, back
// to it within 100 ms of sending, then probing upwards, so that senders queue in the
// client instead of being refused together and coming back together. A
// refusal that names the broker's own state (STORAGE_LOAD, RocketMQ's
// "[TIMEOUT_CLEAN_QUEUE]" send queue) paces every topic of the endpoint.
// Each refused message still waits its own throttle schedule, and a retry
// after a failure is never held. Throttles with the broker's RetryInfo hint
// end the pacing. Applies to New, NewFromConn and the interceptor, not per
// call (the interceptor paces per target and topic).
func WithPacing(on bool) Option {
	return option{"WithPacing", scopeProducer | scopeInterceptor, func(c *config) error {
		c.pacing = on
		return nil
	}}
}
