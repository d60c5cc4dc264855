package producer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	wirermq "github.com/rocketry-go/rocketry/producer/internal/wire/rocketmq"
)

// Protocol is the wire protocol a Producer speaks (WithProtocol).
type Protocol uint8

const (
	// RocketryV1 is rocketry's own protocol, rocketry.v1.MessagingService:
	// the bundled test broker's contract, what NewFromConn and New's
	// targets with a scheme speak.
	RocketryV1 Protocol = iota
	// RocketMQ5 is apache.rocketmq.v2.MessagingService, spoken by the
	// proxies of Apache RocketMQ 5 and cloud RocketMQ services, and by the
	// bundled broker: New's default. New's target lists the proxy's access points; the
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

// WithProtocol sets the wire protocol, overriding New's default of
// RocketMQ5 (what RocketMQ 5 proxies speak; a target with a scheme, such
// as dns:///, takes RocketryV1). With RocketMQ5, WithCredentials, WithTLS, WithNamespace,
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
// client (producer/internal/wire/rocketmq): it returns once a server has
// answered with its Settings.
func newRocketMQ(target string, cfg config, addrs []string) (*Producer, error) {
	t, err := wirermq.New(addrs, cfg.rmqConfig())
	if err != nil {
		return nil, fmt.Errorf("producer: New(%q): %w", target, err)
	}
	if cfg.rmq.serverRetryPolicy {
		cfg.Throttle = t.ServerSchedule(cfg.Throttle)
	}
	// The options first, the network after.
	p := newProducer(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.AttemptTimeout)
	defer cancel()
	if err := t.Start(ctx, p.env()); err != nil {
		p.abandon()
		return nil, fmt.Errorf("producer: New(%q): %w", target, explainProtocol(err))
	}
	p.tr = t
	return p, nil
}

// rmqConfig is what RocketMQ 5's client takes of c: its settings, the
// dial options, the policy (for its own calls' timeout and the retries of
// EndTransaction and RecallMessage), pacing, and the checker of orphaned
// transactions and its events.
func (c *config) rmqConfig() wirermq.Config {
	rc := wirermq.Config{
		Settings: wirermq.Settings{
			AccessKey: c.rmq.accessKey, SecretKey: c.rmq.secretKey, SecurityToken: c.rmq.securityToken,
			TLS: c.rmq.tls, Namespace: c.rmq.namespace,
		},
		Dial:   c.dialOpts,
		Send:   &c.Config,
		Pacing: c.pacing,
	}
	if check := c.rmq.txChecker; check != nil {
		rc.Checker = func(ctx context.Context, m Message, info wirermq.CheckInfo) wirermq.Resolution {
			tc := &TransactionCheck{TransactionID: info.TransactionID, SystemProperties: info.System}
			return wirermq.Resolution(check(context.WithValue(ctx, transactionCheckKey{}, tc), &m))
		}
	}
	if c.watched() {
		rc.Checked = func(ctx context.Context, ch wirermq.Checked) {
			kind := EventCommit
			if !ch.Commit {
				kind = EventRollback
			}
			c.emit(ctx, Event{Kind: kind, MessageID: ch.MessageID, Attempt: ch.Attempts, Endpoint: ch.Endpoint, Err: explainProtocol(ch.Err), Check: true})
		}
	}
	return rc
}

// ErrWrongProtocol is wrapped by the error of New or of a send when the
// server answered UNIMPLEMENTED for the service of the producer's protocol:
// it speaks the other one (a RocketMQ 5 proxy serves only
// apache.rocketmq.v2). The error's text names the option to use, and
// status.Code still reads UNIMPLEMENTED. It is never retried.
var ErrWrongProtocol = errors.New("producer: the server does not serve the producer's protocol")

// The gRPC services of the two protocols, as a server that lacks one names
// it in its UNIMPLEMENTED answer (grpc-go: "unknown service <name>").
const (
	serviceV1  = "rocketry.v1.MessagingService"
	serviceRMQ = "apache.rocketmq.v2.MessagingService"
)

// wrongProtocolError is ErrWrongProtocol with the server's answer.
type wrongProtocolError struct {
	msg string
	err error // the UNIMPLEMENTED status error
}

func (e *wrongProtocolError) Error() string   { return e.msg }
func (e *wrongProtocolError) Unwrap() []error { return []error{ErrWrongProtocol, e.err} }

// GRPCStatus is the server's UNIMPLEMENTED, for status.Code and
// status.FromError.
func (e *wrongProtocolError) GRPCStatus() *status.Status {
	s, _ := status.FromError(e.err)
	return s
}

// wrongProtocol reads err as an UNIMPLEMENTED answer for one protocol's
// service and returns the error that names the option to use; nil for any
// other error (an UNIMPLEMENTED for another service, through the
// interceptor, is not ours to explain).
func wrongProtocol(err error) error {
	if err == nil {
		return nil
	}
	var pe *wrongProtocolError
	if errors.As(err, &pe) {
		return nil // explained already
	}
	var gs interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &gs) {
		return nil
	}
	s := gs.GRPCStatus() // the server's own answer, under any wrapping
	if s.Code() != codes.Unimplemented {
		return nil
	}
	var spoke, use string
	switch msg := s.Message(); {
	case strings.Contains(msg, "unknown service "+serviceV1):
		spoke, use = RocketryV1.String(), "WithProtocol(RocketMQ5) for a RocketMQ 5 proxy (rocketry produce: --protocol rocketmq)"
	case strings.Contains(msg, "unknown service "+serviceRMQ):
		spoke, use = RocketMQ5.String(), "WithProtocol(RocketryV1) for a server of rocketry.v1 (rocketry produce: --protocol rocketry)"
	default:
		return nil
	}
	return &wrongProtocolError{
		msg: "producer: the server does not serve " + spoke + " (" + s.Code().String() + ": " + s.Message() + "): use " + use,
		err: err,
	}
}
