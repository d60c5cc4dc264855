package otelrocketry

import (
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// The attribute combinations of the metrics.
const (
	setBase     uint8 = iota // system, destination
	setOp                    // + operation name and type, server.* [, error.type]
	setFailed                // + error.type
	setThrottle              // + rocketry.throttle.reason, server.*
	setRetry                 // + rocketry.retry.why, server.*
	setDelay                 // + rocketry.retry.why
)

// setKey names one attribute set: its combination and values.
type setKey struct {
	kind                          uint8
	system, topic, endpoint, more string
}

// maxSets bounds the cache: past it (topics or endpoints without end),
// sets are built for each measurement instead.
const maxSets = 4096

// setCache keeps the attribute sets of the measurements, built once, so
// that recording a measurement allocates nothing for its attributes. It is
// safe for concurrent use.
type setCache struct {
	mu sync.RWMutex
	m  map[setKey]metric.MeasurementOption
}

// get returns the measurement option of k's attributes.
func (c *setCache) get(k setKey) metric.MeasurementOption {
	c.mu.RLock()
	o, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return o
	}
	o = metric.WithAttributeSet(attribute.NewSet(k.attrs()...))
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[setKey]metric.MeasurementOption)
	}
	if len(c.m) < maxSets {
		c.m[k] = o
	}
	c.mu.Unlock()
	return o
}

// attrs builds k's attributes.
func (k setKey) attrs() []attribute.KeyValue {
	a := make([]attribute.KeyValue, 0, 7)
	a = append(a, semconv.MessagingSystemKey.String(k.system), semconv.MessagingDestinationName(k.topic))
	switch k.kind {
	case setOp:
		a = serverAttrs(k.endpoint, append(a, opName, opType))
		if k.more != "" {
			a = append(a, semconv.ErrorTypeKey.String(k.more))
		}
	case setFailed:
		a = append(a, semconv.ErrorTypeKey.String(k.more))
	case setThrottle:
		a = serverAttrs(k.endpoint, append(a, AttrThrottleReason.String(k.more)))
	case setRetry:
		a = serverAttrs(k.endpoint, append(a, AttrRetryWhy.String(k.more)))
	case setDelay:
		a = append(a, AttrRetryWhy.String(k.more))
	}
	return a
}
