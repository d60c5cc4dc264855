package xrand

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLockedRepeatsItsSeedsAndSharesSafely(t *testing.T) {
	a, b := New(7, 9), New(7, 9)
	for i := range 100 {
		x, y := a.Float64(), b.Float64()
		require.Equal(t, x, y, "draw %d from the same seeds", i)
		require.True(t, x >= 0 && x < 1, "draw %d = %v; want in [0, 1)", i, x)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				_ = a.Float64()
			}
		})
	}
	wg.Wait()
}
