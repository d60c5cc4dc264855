package producer

// pacer is the throttle state of an attempt to queue ep's broker: the
// broker's, and the topic's there (pace.go says which throttle is whose),
// shared by every send of the client; a broker name is the finest scope a
// client can name behind a cluster-mode proxy. None when pacing is off, or
// before the first attempt has read the topic's route from the cache or
// the server.
func (a *rmqCall) pacer(ep int) pace {
	if !a.c.pacing {
		return pace{}
	}
	if !a.cachedRoute() {
		return pace{}
	}
	return a.c.brokerPacer(a.route.queue(ep).broker).of(a.topic)
}

// brokerPacer returns the pacer of the named broker, making it on first
// use. It is on every attempt's path: a sync.Map read, no lock.
func (c *rmqClient) brokerPacer(broker string) *pacers {
	if p, ok := c.pacers.Load(broker); ok {
		return p.(*pacers)
	}
	p, _ := c.pacers.LoadOrStore(broker, new(pacers))
	return p.(*pacers)
}
