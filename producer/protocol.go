package producer

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
)

// Protocol is the wire protocol a Producer speaks (WithProtocol).
type Protocol uint8

const (
	// RocketryV1 is rocketry's own protocol, rocketry.v1.MessagingService:
	// the bundled test broker's contract, and the default.
	RocketryV1 Protocol = iota
	// RocketMQ5 is apache.rocketmq.v2.MessagingService, spoken by the
	// proxies of Apache RocketMQ 5 and cloud RocketMQ services, and by the
	// bundled broker. New's target lists the proxy's access points; the
	// producer reads each topic's route from them (QueryRoute), keeps a
	// Telemetry session (New waits for the server's Settings, within the
	// attempt timeout), sends heartbeats, and tells the server on Close
	// (NotifyClientTermination).
	RocketMQ5
)

// String returns "rocketry.v1" or "apache.rocketmq.v2".
func (p Protocol) String() string {
	switch p {
	case RocketryV1:
		return "rocketry.v1"
	case RocketMQ5:
		return "apache.rocketmq.v2"
	}
	return "Protocol(" + strconv.Itoa(int(p)) + ")"
}

// WithProtocol sets the wire protocol, overriding the default of
// RocketryV1. With RocketMQ5, WithCredentials, WithTLS, WithNamespace,
// WithServerRetryPolicy and WithTransactionChecker apply, a transactional
// message is sent in a transaction (Producer.BeginTransaction), and a timed
// message can be recalled (Producer.Recall). Applies to New only.
func WithProtocol(p Protocol) Option {
	return option{"WithProtocol", scopeNew, func(c *config) error {
		if p != RocketryV1 && p != RocketMQ5 {
			return invalid(p.String(), "must be RocketryV1 or RocketMQ5")
		}
		c.protocol = p
		return nil
	}}
}

// checkProtocol refuses RocketMQ 5 options given to a rocketry.v1
// producer, naming the first.
func (c *config) checkProtocol(where string) error {
	if c.protocol == RocketMQ5 {
		return nil
	}
	name := ""
	switch {
	case c.rmq.accessKey != "":
		name = "WithCredentials"
	case c.rmq.tls != nil:
		name = "WithTLS"
	case c.rmq.namespace != "":
		name = "WithNamespace"
	case c.rmq.serverRetryPolicy:
		name = "WithServerRetryPolicy"
	case c.rmq.txChecker != nil:
		name = "WithTransactionChecker"
	}
	if name != "" {
		return &OptionError{Option: name, Where: where, Reason: "applies only with WithProtocol(RocketMQ5), not to"}
	}
	return nil
}

// newRocketMQ makes the Producer of a RocketMQ 5 target and starts its
// client: it returns once a server has answered with its Settings.
func newRocketMQ(target string, cfg config, addrs []string) (*Producer, error) {
	c, err := newRMQClient(addrs, &cfg)
	if err != nil {
		return nil, fmt.Errorf("producer: New(%q): %w", target, err)
	}
	if cfg.rmq.serverRetryPolicy {
		cfg.Throttle = serverSchedule{c: c, fallback: cfg.Throttle}
	}
	// The options first, the network after.
	p := newProducer(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.AttemptTimeout)
	defer cancel()
	if err := c.start(ctx); err != nil {
		p.abandon()
		return nil, fmt.Errorf("producer: New(%q): %w", target, err)
	}
	p.tr = &rmqTransport{c: c, cfg: &p.cfg.Config}
	return p, nil
}

// serverSchedule is the throttle schedule of WithServerRetryPolicy: the
// waits of the server's latest backoff_policy, or fallback while the server
// has sent none that can be read.
type serverSchedule struct {
	c        *rmqClient
	fallback backoff.Schedule
}

func (s serverSchedule) Delay(n int, r backoff.Rand) (time.Duration, bool) {
	return s.current().Delay(n, r)
}

// MinAttemptTimeout passes on the least time per try of the schedule in
// use: none for the server's policy, the fallback's (MIN_CONNECT_TIMEOUT
// for the connection backoff) while it stands in.
func (s serverSchedule) MinAttemptTimeout() time.Duration {
	if f, ok := s.current().(backoff.AttemptFloor); ok {
		return f.MinAttemptTimeout()
	}
	return 0
}

// current is the server's latest readable policy, or the fallback.
func (s serverSchedule) current() backoff.Schedule {
	if sch, ok := rmqThrottleSchedule(s.c.serverRetryPolicy()); ok {
		return sch
	}
	return s.fallback
}
