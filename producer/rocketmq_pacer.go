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
// use.
func (c *rmqClient) brokerPacer(broker string) *pacer {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pacers[broker]
	if p == nil {
		if c.pacers == nil {
			c.pacers = map[string]*pacer{}
		}
		p = new(pacer)
		c.pacers[broker] = p
	}
	return p
}
