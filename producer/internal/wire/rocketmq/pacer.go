package wirermq

import "github.com/rocketry-go/rocketry/producer/internal/pace"

// pacer is the throttle state of an attempt to queue ep's broker: the
// broker's, and the topic's there (internal/send/pacing.go says which throttle is whose),
// shared by every send of the client; a broker name is the finest scope a
// client can name behind a cluster-mode proxy. None when pacing is off, or
// before the first attempt has read the topic's route from the cache or
// the server.
func (a *rmqCall) Pacer(ep int) pace.Pace {
	if !a.c.pacing {
		return pace.Pace{}
	}
	if !a.cachedRoute() {
		return pace.Pace{}
	}
	return a.c.brokerPacer(a.route.queue(ep).broker).Of(a.topic)
}

// brokerPacer returns the pacer of the named broker, making it on first
// use. It is on every attempt's path: a sync.Map read, no lock.
func (c *rmqClient) brokerPacer(broker string) *pace.Pacers {
	if p, ok := c.pacers.Load(broker); ok {
		return p.(*pace.Pacers)
	}
	p, _ := c.pacers.LoadOrStore(broker, new(pace.Pacers))
	return p.(*pace.Pacers)
}
