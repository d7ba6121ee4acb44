package relay

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"time"
)

// readyTimeout bounds the database ping of a readiness check.
const readyTimeout = 2 * time.Second

// readyCacheFor is how long an answer of Ready serves the checks that
// follow it.
const readyCacheFor = time.Second

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

func (h *claimHealth) recordFailure(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since.IsZero() {
		h.since = time.Now()
	}
	h.lastErr = err
}

func (h *claimHealth) recordSuccess() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.since, h.lastErr = time.Time{}, nil
}

// checkHealth returns an error when claims have failed for claimsFailingFor.
func (h *claimHealth) checkHealth(now time.Time) error {
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

// settleHealth is whether settles are written down: since when every settle
// fails, and when a row's settle was last refused on its own (isolated).
// It is safe for concurrent use.
type settleHealth struct {
	// refusedFor is how long a row refused on its own keeps the relay not
	// ready: twice the lease, so that the same row, claimed and refused
	// again after each lease, keeps it not ready while it lasts.
	refusedFor time.Duration

	mu      sync.Mutex
	since   time.Time // zero while settles succeed
	lastErr error

	refusedAt  time.Time
	refusedIDs []int64 // the latest, at most maxRefusedIDs
	refusedErr error
}

// maxRefusedIDs bounds the ids of refused rows that /readyz names.
const maxRefusedIDs = 10

func (h *settleHealth) recordFailure(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since.IsZero() {
		h.since = time.Now()
	}
	h.lastErr = err
}

func (h *settleHealth) recordSuccess() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.since, h.lastErr = time.Time{}, nil
}

// rowRefused records a row whose settle was refused on its own.
func (h *settleHealth) rowRefused(id int64, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if now.Sub(h.refusedAt) >= h.refusedFor {
		h.refusedIDs = h.refusedIDs[:0]
	}
	h.refusedAt, h.refusedErr = now, err
	if !slices.Contains(h.refusedIDs, id) {
		h.refusedIDs = append(h.refusedIDs, id)
		if len(h.refusedIDs) > maxRefusedIDs {
			h.refusedIDs = h.refusedIDs[1:]
		}
	}
}

// checkHealth returns an error when settles have failed for claimsFailingFor, or
// a row's settle was refused within refusedFor.
func (h *settleHealth) checkHealth(now time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.refusedAt.IsZero() && now.Sub(h.refusedAt) < h.refusedFor {
		return fmt.Errorf("the settle of rows %v is refused (%s ago): %s", h.refusedIDs, now.Sub(h.refusedAt).Round(time.Second), redactConnError(h.refusedErr))
	}
	if !h.since.IsZero() && now.Sub(h.since) >= claimsFailingFor {
		return fmt.Errorf("settles have failed for %s: %s", now.Sub(h.since).Round(time.Second), redactConnError(h.lastErr))
	}
	return nil
}
