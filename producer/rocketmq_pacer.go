package producer

// pacer is the throttle state of queue ep's broker (pacer.go): one per
// broker name, shared by every send of the client, since a broker
// throttles all of its queues together. nil when pacing is off, or before
// the first attempt has read the topic's route from the cache or the
// server.
func (a *rmqCall) pacer(ep int) *pacer {
	if !a.c.pacing {
		return nil
	}
	if !a.cachedRoute() {
		return nil
	}
	return a.c.brokerPacer(a.route.queue(ep).broker)
}

// brokerPacer returns the pacer of the named broker, making it on first
// use. It is on every attempt's path: a sync.Map read, no lock.
func (c *rmqClient) brokerPacer(broker string) *pacer {
	if p, ok := c.pacers.Load(broker); ok {
		return p.(*pacer)
	}
	p, _ := c.pacers.LoadOrStore(broker, new(pacer))
	return p.(*pacer)
}
