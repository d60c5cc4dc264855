package producer

import (
	"crypto/tls"
	"strconv"
)

// rmqSettings are the options of the apache.rocketmq.v2 protocol. The zero
// value is an anonymous, plaintext client in no namespace that leaves
// retries to the producer's own options.
type rmqSettings struct {
	// accessKey and secretKey sign every call (authorization header); both
	// empty: calls are not signed.
	accessKey, secretKey string
	// securityToken is sent as x-mq-session-token; empty: not sent.
	securityToken string
	// tls is the TLS configuration of every connection; nil: plaintext.
	tls *tls.Config
	// namespace is sent as x-mq-namespace and in every Resource; empty: none.
	namespace string
	// serverRetryPolicy: the server's backoff_policy (from the telemetry
	// Settings) replaces the producer's throttle schedule.
	serverRetryPolicy bool
	// txChecker resolves the orphaned transactions the server asks about
	// (WithTransactionChecker); nil: they are left to the server.
	txChecker TransactionChecker
}

// WithCredentials makes every call to a RocketMQ 5 server signed as the
// official clients sign theirs: an authorization header "MQv2-HMAC-SHA1
// Credential=<accessKey>, SignedHeaders=x-mq-date-time, Signature=<HMAC-SHA1
// of x-mq-date-time with secretKey, upper-case hex>", and securityToken,
// when not empty, as x-mq-session-token (for temporary STS credentials).
// Without it, calls are not signed. accessKey and secretKey must not be
// empty and, like securityToken, must be printable ASCII (they ride in
// gRPC metadata). A server that refuses them fails New, or a send, at
// once with an *AuthError matching ErrUnauthorized. Applies to New only,
// with WithProtocol(RocketMQ5).
func WithCredentials(accessKey, secretKey, securityToken string) Option {
	return option{"WithCredentials", scopeNew, func(c *config) error {
		// The secrets are never echoed in the error.
		value := strconv.Quote(accessKey) + ", <secret>, <token>"
		switch {
		case accessKey == "" || secretKey == "":
			return invalid(value, "accessKey and secretKey must not be empty")
		case !printableASCII(accessKey) || !printableASCII(secretKey) || !printableASCII(securityToken):
			return invalid(value, "must be printable ASCII")
		}
		c.rmq.accessKey, c.rmq.secretKey, c.rmq.securityToken = accessKey, secretKey, securityToken
		return nil
	}}
}

// WithTLS makes every connection to a RocketMQ 5 server use TLS with cfg
// (cloned), overriding the default of plaintext. cfg must not be nil; a
// later grpc.WithTransportCredentials given to WithDialOptions replaces
// it. Applies to New only, with WithProtocol(RocketMQ5).
func WithTLS(cfg *tls.Config) Option {
	return option{"WithTLS", scopeNew, func(c *config) error {
		if cfg == nil {
			return invalid("nil", "must not be nil")
		}
		c.rmq.tls = cfg.Clone()
		return nil
	}}
}

// WithNamespace sets the RocketMQ 5 namespace: the x-mq-namespace header of
// every call and the resource_namespace of every topic, overriding the
// default of none. ns must be 1 to 64 characters of letters, digits, '_',
// '-', '%' and '|' (RocketMQ's own rule). Applies to New only, with
// WithProtocol(RocketMQ5).
func WithNamespace(ns string) Option {
	return option{"WithNamespace", scopeNew, func(c *config) error {
		if !validNamespace(ns) {
			return invalid(strconv.Quote(ns), "must be 1 to 64 of [A-Za-z0-9_%|-]")
		}
		c.rmq.namespace = ns
		return nil
	}}
}

// WithServerRetryPolicy lets the RocketMQ 5 server's retry advice (the
// backoff_policy of the Settings it sends on the telemetry stream) set the
// wait after a throttle, as the official clients do: they take the server's
// waits and keep their own attempt count, so WithMaxAttempts still counts
// the attempts. Without it, the producer's own options
// (WithThrottleSchedule, WithDeliveryPolicy, ...) stay in charge and the
// server's advice is only recorded. Applies to New only, with
// WithProtocol(RocketMQ5).
func WithServerRetryPolicy() Option {
	return option{"WithServerRetryPolicy", scopeNew, func(c *config) error {
		c.rmq.serverRetryPolicy = true
		return nil
	}}
}

// printableASCII reports whether s may be a gRPC metadata value as is.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func validNamespace(ns string) bool {
	if len(ns) == 0 || len(ns) > 64 {
		return false
	}
	for i := 0; i < len(ns); i++ {
		switch b := ns[i]; {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9',
			b == '_', b == '-', b == '%', b == '|':
		default:
			return false
		}
	}
	return true
}
