package relay

import (
	"math/rand/v2"
	"time"
)

// backoff returns the delay after a failed attempt: lo doubled per attempt
// (lo, 2×lo, 4×lo, …) up to hi, then spread by ±20% jitter so that rows that
// failed together do not come back together.
func backoff(attempt int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 1; i < attempt && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}
