package deadline

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestFits(t *testing.T) {
	now := time.Unix(1000, 0)
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(time.Second))
	defer cancel()
	assert.True(t, Fits(ctx, now.Add(999*time.Millisecond)), "ends before the deadline")
	assert.False(t, Fits(ctx, now.Add(time.Second)), "ends at the deadline: no time left for the attempt")
	assert.False(t, Fits(ctx, now.Add(2*time.Second)), "ends after it")
	assert.True(t, Fits(context.Background(), now.Add(time.Hour)), "no deadline: every wait fits")
}
