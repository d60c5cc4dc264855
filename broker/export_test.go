package broker

import "time"

// WithGracePeriod sets how long Stop lets calls in flight finish before it
// ends them (2 s by default): an hour makes a test that passes show that
// Stop did not wait for it.
func WithGracePeriod(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		c.gracePeriod = d
		return nil
	})
}
