package producer

import (
	"google.golang.org/grpc/resolver"

	"github.com/rocketry-go/rocketry/producer/internal/wire"
)

// A target with a scheme is resolved by rocketry.v1's transport
// (producer/internal/wire/v1, targets.go): one connection per resolved
// endpoint, each send holding the endpoints it started with.

// WithResolvers adds resolvers for targets with a scheme, looked up by
// scheme before gRPC's global registry (resolver.Get), as
// grpc.WithResolvers does for a grpc.ClientConn. A resolver given to gRPC
// with WithDialOptions(grpc.WithResolvers(...)) is not seen by the
// producer, which resolves its target itself: give it here. A nil builder
// is an error. Applies to New only.
func WithResolvers(builders ...resolver.Builder) Option {
	return option{"WithResolvers", scopeNew, func(c *config) error {
		for _, b := range builders {
			if b == nil {
				return invalid("nil", "a resolver must not be nil")
			}
		}
		c.resolvers = append(c.resolvers, builders...)
		return nil
	}}
}

// badTarget is New's error for a bad target (a *wire.TargetError, as the
// transports make it); errors.Is matches ErrInvalidTarget.
func badTarget(format string, args ...any) error { return wire.BadTarget(format, args...) }
