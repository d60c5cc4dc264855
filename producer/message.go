package producer

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync/atomic"
	"unicode/utf8"
)

// DefaultMaxBodyBytes is the largest body a message may have unless
// WithMaxBodyBytes says otherwise: the test broker's default limit, 4 MiB.
const DefaultMaxBodyBytes = 4 << 20

// Message is one message to send. A Message must not be changed while a send
// of it is in flight.
type Message struct {
	// ID identifies the message to the broker, which stores each ID once.
	// When empty, the producer sets it before the first attempt; every
	// attempt of a send reuses it, so a retry never stores a duplicate.
	ID string
	// Topic is required.
	Topic string
	// Tag is an optional sub-topic a consumer may filter on.
	Tag string
	// Keys are optional business keys, for look-up.
	Keys []string
	// Properties are optional user properties.
	Properties map[string]string
	// Body is the payload; at most the producer's MaxBodyBytes.
	Body []byte
	// Transactional marks a message that is never retried after an outcome
	// that is unknown (an attempt's timeout, a lost connection, a 5xx): only
	// after an explicit "not stored" such as 530 TOO_MANY_REQUESTS.
	Transactional bool
}

// validate checks m before any network call.
func (m *Message) validate(maxBody int) error {
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

// idGen makes message IDs: a random per-process prefix and a counter, so an
// ID costs one small allocation and never repeats within a process.
type idGen struct {
	prefix string
	n      atomic.Uint64
}

func newIDGen() *idGen {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return &idGen{prefix: hex.EncodeToString(b[:]) + "-"}
}

func (g *idGen) next() string {
	var buf [40]byte
	out := append(buf[:0], g.prefix...)
	out = strconv.AppendUint(out, g.n.Add(1), 36)
	return string(out)
}
