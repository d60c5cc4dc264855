package broker

import "fmt"

// ProxyMode is how the apache.rocketmq.v2 face answers, as the RocketMQ 5
// proxy does in one of its two deployment modes.
type ProxyMode int

const (
	// ProxyCluster, the default, answers as a proxy in cluster mode, in
	// front of brokers it reaches over the network
	// (proxy/src/main/java/org/apache/rocketmq/proxy/service/message/ClusterMessageService.java):
	// a batch's one SendResultEntry carries the messages' ids joined by
	// commas (client/src/main/java/org/apache/rocketmq/client/impl/MQClientAPIImpl.java,
	// processSendResponse), and the broker's SYSTEM_BUSY is 42900
	// TOO_MANY_REQUESTS (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/common/ResponseBuilder.java).
	ProxyCluster ProxyMode = iota
	// ProxyLocal answers as a proxy in local mode, in the broker's own
	// process (proxy/src/main/java/org/apache/rocketmq/proxy/service/message/LocalMessageService.java):
	// a batch's one SendResultEntry carries a new id made for the batch,
	// and every answer of the broker that is not a success, busy included,
	// is 50001 INTERNAL_SERVER_ERROR with the broker's text. The proxy's
	// own refusals (validation, 40402 TOPIC_NOT_FOUND) keep their codes.
	ProxyLocal
)

// String is "cluster" or "local".
func (m ProxyMode) String() string {
	switch m {
	case ProxyCluster:
		return "cluster"
	case ProxyLocal:
		return "local"
	}
	return fmt.Sprintf("ProxyMode(%d)", int(m))
}

// WithProxyMode sets how the apache.rocketmq.v2 face answers, overriding
// the default of ProxyCluster. A mode other than ProxyCluster and
// ProxyLocal is an error.
func WithProxyMode(m ProxyMode) Option {
	return optionFunc(func(c *config) error {
		if m != ProxyCluster && m != ProxyLocal {
			return errorf("WithProxyMode(%v): want ProxyCluster or ProxyLocal", m)
		}
		c.proxyMode = m
		return nil
	})
}

// WithRocketMQDedup sets whether the apache.rocketmq.v2 face answers a
// message whose id the dedup window remembers as stored (true) instead of
// storing it again (false, the default, as a RocketMQ broker does: it
// does not deduplicate by message id, so a message sent twice is stored
// twice, and Stats counts the copies). Tests about something else than
// copies may turn it on. rocketry.v1 always deduplicates.
func WithRocketMQDedup(on bool) Option {
	return optionFunc(func(c *config) error {
		c.rocketmqDedup = on
		return nil
	})
}
