package producer

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rocketry-go/rocketry/message"
)

// The limits a RocketMQ 5 proxy puts on a message group and a delivery time
// (its ProxyConfig defaults: maxMessageGroupSize 64, refused from 64 bytes;
// maxDelayTimeMills 24 h), checked before any attempt on both protocols.
const (
	MaxMessageGroupBytes = 63
	MaxDeliveryDelay     = 24 * time.Hour
)

// DefaultMaxBodyBytes is the largest body a message may have unless
// WithMaxBodyBytes says otherwise: the test broker's default limit, 4 MiB.
const DefaultMaxBodyBytes = 4 << 20

// Message is one message to send. It is message.Message (package
// github.com/rocketry-go/rocketry/message, which documents its fields):
// the wire protocols take it as it is. A Message must not be changed while
// a send of it is in flight.
type Message = message.Message

// validate checks m before any network call.
func validate(m *Message, maxBody int) error {
	switch {
	case m == nil:
		return fmt.Errorf("%w: message is nil", ErrInvalidMessage)
	case m.Topic == "":
		return fmt.Errorf("%w: topic is empty", ErrInvalidMessage)
	case !utf8.ValidString(m.Topic):
		return fmt.Errorf("%w: topic is not valid UTF-8", ErrInvalidMessage)
	case len(m.Body) > maxBody:
		return fmt.Errorf("%w: body is %d bytes, over the limit of %d", ErrInvalidMessage, len(m.Body), maxBody)
	case !utf8.ValidString(m.ID):
		return fmt.Errorf("%w: id is not valid UTF-8", ErrInvalidMessage)
	case !utf8.ValidString(m.Tag):
		return fmt.Errorf("%w: tag is not valid UTF-8", ErrInvalidMessage)
	}
	if err := validateType(m, time.Now()); err != nil {
		return err
	}
	// proto3 strings must be UTF-8: gRPC would refuse to marshal them (an
	// INTERNAL error, retried), and so would the dead-letter store.
	for i, k := range m.Keys {
		if !utf8.ValidString(k) {
			return fmt.Errorf("%w: key %d is not valid UTF-8", ErrInvalidMessage, i)
		}
	}
	for k, v := range m.Properties {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fmt.Errorf("%w: property %q is not valid UTF-8", ErrInvalidMessage, k)
		}
	}
	return nil
}

// validateType checks the message's type at now: MessageGroup,
// DeliveryTime and Transactional exclude each other (rocketmq-clients'
// java/client/.../message/MessageBuilderImpl.java, setDeliveryTimestamp and
// setMessageGroup, and PublishingMessageImpl's "Transactional message
// should not set messageGroup or deliveryTimestamp"), a group is checked
// as the proxy checks it (40006) and a delivery time more than
// MaxDeliveryDelay ahead is refused, as the proxy refuses it with 40012
// (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/producer/SendMessageActivity.java,
// validateMessageGroup and validateDelayTime).
func validateType(m *Message, now time.Time) error {
	g, timed := m.MessageGroup, !m.DeliveryTime.IsZero()
	switch {
	case g != "" && timed:
		return fmt.Errorf("%w: MessageGroup and DeliveryTime are both set; a message is FIFO or timed, not both", ErrInvalidMessage)
	case m.Transactional && g != "":
		return fmt.Errorf("%w: Transactional and MessageGroup are both set; a transactional message has no group", ErrInvalidMessage)
	case m.Transactional && timed:
		return fmt.Errorf("%w: Transactional and DeliveryTime are both set; a transactional message is not timed", ErrInvalidMessage)
	case timed && m.DeliveryTime.Sub(now) > MaxDeliveryDelay:
		return fmt.Errorf("%w: DeliveryTime %s is %v ahead; the most is %v", ErrInvalidMessage,
			m.DeliveryTime.UTC().Format(time.RFC3339), m.DeliveryTime.Sub(now).Round(time.Second), MaxDeliveryDelay)
	case g == "":
		return nil
	case strings.TrimFunc(g, unicode.IsSpace) == "":
		return fmt.Errorf("%w: MessageGroup %q is blank", ErrInvalidMessage, g)
	case len(g) > MaxMessageGroupBytes:
		return fmt.Errorf("%w: MessageGroup is %d bytes; the most is %d", ErrInvalidMessage, len(g), MaxMessageGroupBytes)
	case !utf8.ValidString(g):
		return fmt.Errorf("%w: MessageGroup is not valid UTF-8", ErrInvalidMessage)
	case strings.IndexFunc(g, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: MessageGroup %q has a control character", ErrInvalidMessage, g)
	}
	return nil
}
