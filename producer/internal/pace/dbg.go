package pace

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

var dbg = os.Getenv("PACE_DEBUG") != ""

func (p *Pacer) dbgf(now time.Time, format string, args ...any) {
	if dbg {
		fmt.Printf("%s %p "+format+"\n", append([]any{now.Format("05.000000"), p}, args...)...)
	}
}

var beta = func() float64 {
	if v, err := strconv.ParseFloat(os.Getenv("PACE_BETA"), 64); err == nil {
		return v
	}
	return betaC
}()

var recoverIn = func() time.Duration {
	if v, err := time.ParseDuration(os.Getenv("PACE_K")); err == nil {
		return v
	}
	return recoverInC
}()
