package send

import (
	"context"
	"errors"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAttemptContextShared: on a Shared context, attempts whose deadlines
// fall in one slot share one context, never later than asked and at most
// a slot sooner; it ends at its deadline with the attempt's timeout as
// cause, or with the Shared context; other contexts and near deadlines get
// a context of their own, as before.
func TestAttemptContextShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, stop := context.WithCancelCause(context.Background())
		defer stop(nil)
		sh := NewShared(parent)
		now := time.Now()
		base := now.Add(3 * time.Second).Truncate(slotWidth) // a slot's start
		d1, d2 := base.Add(slotWidth/10), base.Add(slotWidth*9/10)
		a, cancelA := AttemptContext(sh, d1)
		b, cancelB := AttemptContext(sh, d2)
		defer cancelA()
		defer cancelB()
		require.True(t, a == b, "two deadlines of one slot, two contexts")
		got, ok := a.Deadline()
		require.True(t, ok)
		assert.False(t, got.After(d1), "the shared deadline %v is after the asked %v", got, d1)
		assert.Less(t, d1.Sub(got), slotWidth, "the shared deadline is more than a slot early")

		c, cancelC := AttemptContext(sh, d1.Add(2*slotWidth))
		defer cancelC()
		assert.False(t, a == c, "deadlines two slots apart share a context")

		near, cancelNear := AttemptContext(sh, now.Add(minShared/2))
		defer cancelNear()
		nd, _ := near.Deadline()
		assert.Equal(t, now.Add(minShared/2), nd, "a near deadline moved")

		// A deadline past 2262 (an attempt timeout of math.MaxInt64) does
		// not fit unix ns: it gets its own context, exact.
		far := now.Add(math.MaxInt64)
		fc, cancelFar := AttemptContext(sh, far)
		defer cancelFar()
		fd, _ := fc.Deadline()
		assert.Equal(t, far, fd, "a far deadline moved")

		own, cancelOwn := context.WithCancel(context.Background())
		defer cancelOwn()
		x, cancelX := AttemptContext(own, d1)
		xd, _ := x.Deadline()
		assert.Equal(t, d1, xd, "a caller's cancellable context lost its exact deadline")
		cancelX()
		require.Error(t, x.Err(), "the own context's cancel did nothing")
		cancelA() // a shared context's cancel is a no-op: b still runs
		require.NoError(t, b.Err())

		time.Sleep(time.Until(d1)) // the fake clock of the bubble
		synctest.Wait()
		require.ErrorIs(t, a.Err(), context.DeadlineExceeded)
		assert.ErrorIs(t, context.Cause(a), ErrAttemptTimeout)
		require.NoError(t, c.Err(), "the next slot ended early")

		stop(errors.New("closed"))
		assert.ErrorIs(t, c.Err(), context.Canceled, "the Shared context's end did not end its slots")
	})
}

// TestAttemptContextSharedAllocs: an attempt in a slot already made costs
// no allocation.
func TestAttemptContextSharedAllocs(t *testing.T) {
	sh := NewShared(context.Background())
	d := time.Now().Add(time.Hour)
	AttemptContext(sh, d)
	allocs := testing.AllocsPerRun(100, func() {
		ctx, cancel := AttemptContext(sh, d)
		_ = ctx
		cancel()
	})
	assert.Zero(t, allocs)
}
