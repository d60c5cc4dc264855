package broker

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"google.golang.org/protobuf/types/known/durationpb"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
)

// TestPollingTime pins how long a receive waits, as the proxy's
// ReceiveMessageActivity computes it (in a synctest bubble, so that the
// time left before a deadline is exact): the request's
// long_polling_timeout; without one (the official Go client 5.1.2 sends
// none), the time left less half the client's request_timeout of 3 s; then
// within the broker's bounds and before the deadline, less the broker's
// reserve for its answer.
func TestPollingTime(t *testing.T) {
	b := &Broker{cfg: config{minPolling: 100 * time.Millisecond, maxPolling: 20 * time.Second}}
	for _, tc := range []struct {
		name     string
		deadline time.Duration // 0: none
		long     *durationpb.Duration
		want     time.Duration
	}{
		{"Go client: await 200 ms + 3 s", 3200 * time.Millisecond, nil, 1700 * time.Millisecond},
		{"Go client: await 10 s + 3 s", 13 * time.Second, nil, 11500 * time.Millisecond},
		{"no long_polling_timeout, little time left", 1600 * time.Millisecond, nil, 100 * time.Millisecond},
		{"no long_polling_timeout, no deadline", 0, nil, 20 * time.Second},
		{"long_polling_timeout", 3200 * time.Millisecond, durationpb.New(time.Second), time.Second},
		{"long_polling_timeout past the deadline", 3200 * time.Millisecond, durationpb.New(5 * time.Second), 3100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				if tc.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.deadline)
					defer cancel()
				}
				got, st := b.pollingTime(ctx, &rocketmqv2.ReceiveMessageRequest{LongPollingTimeout: tc.long})
				assert.Nil(t, st, "status")
				assert.Equal(t, tc.want, got, "polling time")
			})
		})
	}
}
