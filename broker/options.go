package broker

import (
	"fmt"
	"log/slog"
	"math"
	"time"
)

// Option configures a Broker in New. An option given an invalid value
// makes New fail with an error that names it. Like the producer's options,
// it is an interface that only this package implements.
type Option interface {
	apply(*config) error
}

// optionFunc is an Option: what it does to the config, and its error when
// its value is invalid.
type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// config is the validated configuration of a Broker.
type config struct {
	txCheck      txCheckConfig
	queues       int
	throttle     Throttle
	faults       Faults
	seed         int64
	seeded       bool
	maxBody      int
	maxBatch     int
	dedupCount   int
	dedupTTL     time.Duration
	autoCreate   bool
	topics       []string
	logger       *slog.Logger
	clock        func() time.Time
	gracePeriod  time.Duration
	defaultRecvN int
	observer     SendObserver
	brokerName   string
	peers        func() []Peer
	clientRetry  clientRetryPolicy
	// The apache.rocketmq.v2 face (rocketmq_options.go, sendqueue.go).
	rocketmqDedup bool
	proxyMode     ProxyMode
	sendQueue     SendQueue
	topicTypes    map[string]TopicType
	acl           map[string]string // WithACL; nil: off (rocketmq_acl.go)
	// The bounds of apache.rocketmq.v2 receives (rocketmq_consumer.go).
	minPolling, maxPolling time.Duration
	minInvisible           time.Duration
}

// Defaults of the options.
const (
	DefaultQueues       = 4
	DefaultMaxBodyBytes = 4 << 20
	DefaultMaxBatch     = 128
	DefaultDedupCount   = 1_000_000
	// DefaultReceiveMessages is what ReceiveMessages returns at most when
	// the request's max_messages is 0.
	DefaultReceiveMessages = 32
	// MaxReceiveMessages caps a request's max_messages.
	MaxReceiveMessages = 10_000
	// DefaultBrokerName is the broker name of the queues in an
	// apache.rocketmq.v2 route.
	DefaultBrokerName = "broker-0"
	// The retry policy the broker gives apache.rocketmq.v2 clients in its
	// Telemetry Settings, as the RocketMQ 5 proxy does by default: 3
	// attempts in all (the first and 2 retries), waiting 10 ms, then twice
	// as long each time, at most 1 s.
	DefaultClientMaxAttempts       = 3
	DefaultClientBackoffInitial    = 10 * time.Millisecond
	DefaultClientBackoffMax        = time.Second
	DefaultClientBackoffMultiplier = 2.0
	// DefaultClientRequestTimeout is the request_timeout of the broker's
	// Settings when the client's Settings have none.
	DefaultClientRequestTimeout = 3 * time.Second
	// The bounds of an apache.rocketmq.v2 ReceiveMessage, as the RocketMQ 5
	// proxy's defaults: its long polling lasts 5 s to 20 s, and a received
	// message stays invisible at least 10 s and at most 12 h.
	DefaultMinLongPolling   = 5 * time.Second
	DefaultMaxLongPolling   = 20 * time.Second
	DefaultMinInvisibleTime = 10 * time.Second
	MaxInvisibleTime        = 12 * time.Hour
	maxQueues               = 1024
	maxTopicLen             = 255
	maxIDLen                = 255
)

func defaultConfig() config {
	return config{
		txCheck:      txCheckConfig{interval: DefaultTransactionCheckInterval, max: DefaultTransactionCheckMax},
		queues:       DefaultQueues,
		maxBody:      DefaultMaxBodyBytes,
		maxBatch:     DefaultMaxBatch,
		dedupCount:   DefaultDedupCount,
		autoCreate:   true,
		logger:       slog.New(slog.DiscardHandler),
		clock:        time.Now,
		gracePeriod:  2 * time.Second,
		defaultRecvN: DefaultReceiveMessages,
		brokerName:   DefaultBrokerName,
		minPolling:   DefaultMinLongPolling,
		maxPolling:   DefaultMaxLongPolling,
		minInvisible: DefaultMinInvisibleTime,
		clientRetry: clientRetryPolicy{
			maxAttempts: DefaultClientMaxAttempts,
			initial:     DefaultClientBackoffInitial,
			max:         DefaultClientBackoffMax,
			multiplier:  DefaultClientBackoffMultiplier,
		},
	}
}

// errorf is an option's error.
func errorf(format string, args ...any) error {
	return fmt.Errorf("broker: "+format, args...)
}

// WithQueues sets the number of queues of every topic, overriding the
// default of 4. It must be in 1..1024.
func WithQueues(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 || n > maxQueues {
			return errorf("WithQueues(%d): the number of queues must be in 1..%d", n, maxQueues)
		}
		c.queues = n
		return nil
	})
}

// WithThrottle sets the throttling thresholds, overriding the default of no
// throttling (every threshold 0, off). See Throttle.
func WithThrottle(t Throttle) Option {
	return optionFunc(func(c *config) error {
		if err := t.validate(); err != nil {
			return fmt.Errorf("broker: WithThrottle: %w", err)
		}
		c.throttle = t
		return nil
	})
}

// WithFaults sets the injected faults, overriding the default of none.
// See Faults.
func WithFaults(f Faults) Option {
	return optionFunc(func(c *config) error {
		if err := f.Validate(); err != nil {
			return fmt.Errorf("broker: WithFaults: %w", err)
		}
		c.faults = f
		return nil
	})
}

// WithSeed seeds the random source that picks which calls get a fault, so
// that a run's faults are the same for the same sequence of calls. Without
// it the seed is random.
func WithSeed(seed int64) Option {
	return optionFunc(func(c *config) error {
		c.seed, c.seeded = seed, true
		return nil
	})
}

// WithMaxBodyBytes sets the largest message body the broker stores,
// overriding the default of 4 MiB. A larger body is refused with 413
// MESSAGE_TOO_LARGE. It must be at least 1.
func WithMaxBodyBytes(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 || n > math.MaxInt32 {
			return errorf("WithMaxBodyBytes(%d): the limit must be in 1..%d", n, math.MaxInt32)
		}
		c.maxBody = n
		return nil
	})
}

// WithMaxBatch sets the most messages one SendMessage request may carry,
// overriding the default of 128. It must be at least 1.
func WithMaxBatch(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 || n > 1<<20 {
			return errorf("WithMaxBatch(%d): the batch size must be in 1..%d", n, 1<<20)
		}
		c.maxBatch = n
		return nil
	})
}

// WithDedupWindow sets how many message ids the broker remembers per topic
// to answer repeats as duplicates (count, overriding the default of
// 1,000,000), and for how long (ttl; 0, the default, means no time limit).
// An id forgotten by either limit is stored again when it is sent again.
// count must be at least 1 and ttl must not be negative.
func WithDedupWindow(count int, ttl time.Duration) Option {
	return optionFunc(func(c *config) error {
		if count < 1 {
			return errorf("WithDedupWindow(%d, %v): count must be at least 1", count, ttl)
		}
		if ttl < 0 {
			return errorf("WithDedupWindow(%d, %v): ttl must not be negative", count, ttl)
		}
		c.dedupCount, c.dedupTTL = count, ttl
		return nil
	})
}

// WithAutoCreateTopics sets whether a send to an unknown topic creates it
// (true, the default) or is refused with 404 TOPIC_NOT_FOUND.
func WithAutoCreateTopics(on bool) Option {
	return optionFunc(func(c *config) error {
		c.autoCreate = on
		return nil
	})
}

// WithTopics creates topics up front, for example to use with
// WithAutoCreateTopics(false). Names must be valid topic names.
func WithTopics(names ...string) Option {
	return optionFunc(func(c *config) error {
		for _, n := range names {
			if msg := checkTopic(n); msg != "" {
				return errorf("WithTopics(%q): %s", n, msg)
			}
		}
		c.topics = append(c.topics, names...)
		return nil
	})
}

// WithLogger sets the logger of throttle transitions, restarts, faults and
// panics, overriding the default that discards everything. A nil logger
// is an error.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			return errorf("WithLogger(nil): the logger must not be nil")
		}
		c.logger = l
		return nil
	})
}

// WithClock sets the clock the broker measures the storage load, the send
// rate and the dedup ttl with, overriding the default of time.Now. Tests use
// it to make rates exact. A nil clock is an error.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) error {
		if now == nil {
			return errorf("WithClock(nil): the clock must not be nil")
		}
		c.clock = now
		return nil
	})
}

// Peer is another broker of a cluster, as an apache.rocketmq.v2 route
// names it.
type Peer struct {
	// Name is the broker name of the peer's queues, such as "broker-1".
	Name string
	// Addr is the host:port clients dial, such as "127.0.0.1:7778".
	Addr string
	// Addrs are more addresses of the same broker, listed after Addr in
	// its endpoints (a client tries the next when one fails); none by
	// default.
	Addrs []string
}

// WithBrokerName sets the broker name of this broker's queues in
// apache.rocketmq.v2 routes, overriding the default of "broker-0". It must
// be a valid name (no spaces, at most 255 bytes).
func WithBrokerName(name string) Option {
	return optionFunc(func(c *config) error {
		if msg := checkName("broker name", name, maxTopicLen); msg != "" {
			return errorf("WithBrokerName(%q): %s", name, msg)
		}
		c.brokerName = name
		return nil
	})
}

// WithRoutePeers sets the other brokers an apache.rocketmq.v2 QueryRoute
// answer lists beside this one, overriding the default of none. peers is
// called on every QueryRoute, so a cluster can learn its addresses after
// it starts; a peer with this broker's own address is skipped. Every peer
// is assumed to have this broker's number of queues. A nil function is an
// error.
func WithRoutePeers(peers func() []Peer) Option {
	return optionFunc(func(c *config) error {
		if peers == nil {
			return errorf("WithRoutePeers(nil): the function must not be nil")
		}
		c.peers = peers
		return nil
	})
}

// clientRetryPolicy is the retry policy pushed to apache.rocketmq.v2
// clients.
type clientRetryPolicy struct {
	maxAttempts  int
	initial, max time.Duration
	multiplier   float64
}

// WithClientRetryPolicy sets the retry policy (backoff_policy) the broker
// answers an apache.rocketmq.v2 producer's Settings with, overriding the
// default of the RocketMQ 5 proxy: 3 attempts, 10 ms, 1 s, 2. (A
// consumer's is its group's, as the proxy's: 17 attempts, the preset
// delays from 1 s to 2 h.) maxAttempts
// counts every attempt, the first included, and must be at least 1; the
// wait before retry n (n >= 1) is min(initial*multiplier^(n-1), max).
// initial must be positive, max at least initial and multiplier at least
// 1. Clients decide what they do with it: the official Node.js client, for
// one, keeps its own attempt count and only waits after a 42900.
func WithClientRetryPolicy(maxAttempts int, initial, max time.Duration, multiplier float64) Option {
	return optionFunc(func(c *config) error {
		name := fmt.Sprintf("WithClientRetryPolicy(%d, %v, %v, %v)", maxAttempts, initial, max, multiplier)
		switch {
		case maxAttempts < 1:
			return errorf("%s: maxAttempts must be at least 1", name)
		case initial <= 0:
			return errorf("%s: initial must be positive", name)
		case max < initial:
			return errorf("%s: max must be at least initial", name)
		case !(multiplier >= 1) || math.IsInf(multiplier, 0) || multiplier > math.MaxFloat32:
			return errorf("%s: multiplier must be a finite number >= 1", name)
		default:
			c.clientRetry = clientRetryPolicy{maxAttempts: maxAttempts, initial: initial, max: max, multiplier: multiplier}
		}
		return nil
	})
}

// WithTopicType creates topic name up front, declared to accept only
// messages of type typ, as a RocketMQ topic's message.type attribute does:
// a message of another type is refused with 40014
// MESSAGE_PROPERTY_CONFLICT_WITH_TYPE on apache.rocketmq.v2 (400
// BAD_REQUEST on rocketry.v1, whose messages are NORMAL or TRANSACTION),
// and the queues of its route accept only typ. A message's type follows
// from its properties: TRANSACTION, else DELAY with a delivery time, else
// FIFO with a message group, else NORMAL. Topics not declared accept every
// type (TopicMixed). The name must be a valid topic name; declaring it
// twice keeps the last type.
func WithTopicType(name string, typ TopicType) Option {
	return optionFunc(func(c *config) error {
		if msg := checkTopic(name); msg != "" {
			return errorf("WithTopicType(%q, %v): %s", name, typ, msg)
		}
		if int(typ) >= len(topicTypeNames) {
			return errorf("WithTopicType(%q, %v): not a topic type", name, typ)
		}
		if c.topicTypes == nil {
			c.topicTypes = map[string]TopicType{}
		}
		c.topicTypes[name] = typ
		return nil
	})
}

// WithLongPolling sets how long an apache.rocketmq.v2 ReceiveMessage that
// finds nothing waits for a message: the request's long_polling_timeout
// (without one, the time left before its deadline less 1.5 s, half the
// official clients' request_timeout), raised to min and cut to max, overriding the proxy's defaults of 5 s and
// 20 s. A request whose deadline leaves less than min is answered 40018
// ILLEGAL_POLLING_TIME, or 40000 BAD_REQUEST to a client that sends no
// x-mq-client-version or one before "5.0.3" (the official Go 5.1.2 and
// Node.js clients), as the proxy answers. min must not be negative and max must be at least
// min; tests lower both to keep empty receives short.
func WithLongPolling(min, max time.Duration) Option {
	return optionFunc(func(c *config) error {
		if min < 0 || max < min {
			return errorf("WithLongPolling(%v, %v): want 0 <= min <= max", min, max)
		}
		c.minPolling, c.maxPolling = min, max
		return nil
	})
}

// WithMinInvisibleDuration sets the shortest invisible_duration an
// apache.rocketmq.v2 ReceiveMessage may ask for, overriding the proxy's
// default of 10 s; a shorter one is answered 40011 ILLEGAL_INVISIBLE_TIME,
// as is one over 12 h. It must be in 0..12 h; tests lower it to see
// redelivery quickly.
func WithMinInvisibleDuration(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d < 0 || d > MaxInvisibleTime {
			return errorf("WithMinInvisibleDuration(%v): want 0..%v", d, MaxInvisibleTime)
		}
		c.minInvisible = d
		return nil
	})
}
