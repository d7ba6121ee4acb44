package relay

import (
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"
)

// readyTimeout bounds the database ping of a readiness check.
const readyTimeout = 2 * time.Second

// errDraining is the readiness of a relay that is shutting down.
var errDraining = errors.New("draining: shutting down")

// claimsFailingFor is how long a claim loop's claims may keep failing
// before the relay reports itself not ready.
const claimsFailingFor = 10 * time.Second

// claimHealth is whether one claim loop's claims work: since when they fail,
// and the last error. It is safe for concurrent use.
type claimHealth struct {
	mu      sync.Mutex
	since   time.Time // zero while claims succeed
	lastErr error
}

func (h *claimHealth) failed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since.IsZero() {
		h.since = time.Now()
	}
	h.lastErr = err
}

func (h *claimHealth) succeeded() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.since, h.lastErr = time.Time{}, nil
}

// check returns an error when claims have failed for claimsFailingFor.
func (h *claimHealth) check(now time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since.IsZero() || now.Sub(h.since) < claimsFailingFor {
		return nil
	}
	return fmt.Errorf("claims have failed for %s: %s", now.Sub(h.since).Round(time.Second), redactConnError(h.lastErr))
}

// connTarget matches how pgx names the database it could not reach
// ("failed to connect to `user=app database=orders`"): /readyz, which anyone
// who can reach the port may read, does not say it.
var connTarget = regexp.MustCompile("`user=[^`]*`")

// redactConnError is err's text without the database user and name.
func redactConnError(err error) string {
	if err == nil {
		return ""
	}
	return connTarget.ReplaceAllString(err.Error(), "the database")
}
