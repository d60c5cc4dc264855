package broker

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// TestSendQueueTimeoutCleanQueue: a request that waits MaxWait for a
// worker is refused with BrokerFastFailure's text, exactly; one that
// finds the queue full is refused at once with [OVERLOAD].
func TestSendQueueTimeoutCleanQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newSendQueue(SendQueue{Workers: 1, ServiceTime: time.Second, Capacity: 1})
		stop := make(chan struct{})
		ctx := context.Background()
		served := make(chan time.Duration)
		go func() {
			begin := time.Now()
			done, r := q.wait(ctx, stop)
			assert.Nil(t, r)
			served <- time.Since(begin)
			done()
		}()
		synctest.Wait() // the first holds the worker for its service time
		waiting := make(chan *refusal)
		go func() {
			_, r := q.wait(ctx, stop)
			waiting <- r
		}()
		synctest.Wait() // the second waits
		_, full := q.wait(ctx, stop)
		require.NotNil(t, full)
		assert.Equal(t, "[OVERLOAD]system busy, start flow control for a while", full.msg)
		assert.Equal(t, ReasonOverload, full.tag)
		r := <-waiting
		require.NotNil(t, r)
		assert.Equal(t, rocketryv1.Code_CODE_TOO_MANY_REQUESTS, r.code)
		assert.Equal(t, ReasonTimeoutCleanQueue, r.tag)
		assert.Equal(t, "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: 200ms, size of queue: 0", r.msg)
		assert.Zero(t, r.retry, "no retry hint")
		assert.Equal(t, time.Second, <-served)
		assert.Equal(t, int64(1), q.timeouts.Load())
		assert.Equal(t, int64(1), q.overloads.Load())

		// A request that gets a worker within MaxWait is served.
		done, r := q.wait(ctx, stop)
		require.Nil(t, r)
		done()
	})
}

func TestSendQueueOff(t *testing.T) {
	var q *sendQueue = newSendQueue(SendQueue{})
	assert.Nil(t, q, "Workers 0 is off")
	done, r := q.wait(context.Background(), nil)
	assert.Nil(t, done)
	assert.Nil(t, r)
}
