package producer

import (
	"github.com/rocketry-go/rocketry/producer/internal/wire"
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
func v1Of(p *Producer) *wirev1.Transport[SendReceipt] {
	return p.tr.(*wirev1.Transport[SendReceipt])
}

// rmqID is a new message ID of p's RocketMQ 5 transport, in its format.
func rmqID(p *Producer) string {
	id, _ := p.tr.Prepare(wire.Message{})
	return id
}
