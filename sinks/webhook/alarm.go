package webhook

import (
	"log/slog"
	"sync"
	"sync/atomic"
)

// alarm logs, at error level, a failure that every request meets until the
// operator fixes something (a TLS handshake that fails): once when it
// starts, again only when its reason changes, not once per request, and at
// info when it ends. It is safe for concurrent use.
type alarm struct {
	log    *slog.Logger
	raised atomic.Bool // reason != "": lets clear skip the lock
	mu     sync.Mutex
	reason string // "" while all is well
}

// raise records a failure for reason, logging msg unless reason is the one
// logged last.
func (a *alarm) raise(msg, reason string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if reason == a.reason {
		return
	}
	a.reason = reason
	a.raised.Store(true)
	a.log.Error(msg, "err", reason)
}

// clear ends the failure, logging msg at info if there was one.
func (a *alarm) clear(msg string) {
	if !a.raised.Load() {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.reason == "" {
		return
	}
	a.log.Info(msg, "after", a.reason)
	a.reason = ""
	a.raised.Store(false)
}
