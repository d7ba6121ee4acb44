package relay

import (
	"math/rand/v2"
	"time"
)

// backoffDelay returns the delay after a failed attempt: lo doubled per attempt
// (lo, 2×lo, 4×lo, …) up to hi, spread by ±20% jitter so that rows that
// failed together do not come back together. Jitter that would pass hi is
// reflected below it: hi is the longest delay, and rows at the cap still
// spread out.
func backoffDelay(attempt int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 1; i < attempt && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	j := time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
	if j > hi {
		j = hi - (j - hi)
	}
	return j
}
