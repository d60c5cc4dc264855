// Package deadline holds the one rule by which a send fails with
// ErrDeadlineTooShort instead of waiting: a wait fits only when the next
// attempt can start before the caller's deadline. The executor's retry
// wait, the rate limiter's wait and the pacer's turn all ask it.
package deadline

import (
	"context"
	"time"
)

// Fits reports whether a wait that ends at t leaves the next attempt time
// to start before ctx's deadline: a wait that would end at or after it
// does not fit (nothing could be sent after it), and is not waited.
func Fits(ctx context.Context, t time.Time) bool {
	dl, ok := ctx.Deadline()
	return !ok || t.Before(dl)
}
