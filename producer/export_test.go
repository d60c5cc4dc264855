package producer

import (
	"time"

	"github.com/rocketry-go/rocketry/producer/internal/clock"
	wirev1 "github.com/rocketry-go/rocketry/producer/internal/wire/v1"
)

// OptionPlaces returns where o applies, by the names its errors use: New,
// NewFromConn, UnaryClientInterceptor, WithCallOptions.
func OptionPlaces(o Option) map[string]bool {
	sc := o.scope()
	return map[string]bool{
		"New":                    sc&scopeNew != 0,
		"NewFromConn":            sc&scopeFromConn != 0,
		"UnaryClientInterceptor": sc&scopeInterceptor != 0,
		"WithCallOptions":        sc&scopeCall != 0,
	}
}

// OptionName is o's name, such as "WithMaxAttempts".
func OptionName(o Option) string { return o.name() }

// v1Of is p's rocketry.v1 transport, for a look at its endpoints' state.
func v1Of(p *Producer) *wirev1.Transport {
	return p.tr.(*wirev1.Transport)
}

// rmqID is a new message ID of p's RocketMQ 5 transport, in its format.
func rmqID(p *Producer) string {
	id, _ := p.tr.Prepare(Message{})
	return id
}

// withLinger sets the linger of WithBatching's batches past what
// WithBatching accepts (it must come after WithBatching): with an hour, a
// test that passes shows its batch went without waiting for its linger.
func withLinger(d time.Duration) Option {
	return option{"withLinger", scopeProducer, func(c *config) error {
		c.batch.Linger = d
		return nil
	}}
}

// withClock gives the producer's executor and pacer the clock clk instead
// of the wall clock, for this producer only.
func withClock(clk clock.Clock) Option {
	return option{"withClock", scopeAll, func(c *config) error {
		c.Clock = clk
		return nil
	}}
}

// batchWaiting is the async sends of p waiting in an open batch, and in a
// batch on the wire.
func batchWaiting(p *Producer) (pending, sending int) {
	return p.async.batch.Waiting()
}
