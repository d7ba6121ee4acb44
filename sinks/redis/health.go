package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// How the sink watches the server.
const (
	// probeInterval is the pause between two PINGs while the server
	// answers; a PING is skipped when a batch was answered meanwhile.
	probeInterval = 2 * time.Second
	// retryInterval is the pause between two PINGs while it does not.
	retryInterval = 250 * time.Millisecond
	// probeTimeoutMax bounds one PING (and Config.Timeout, when shorter).
	probeTimeoutMax = 5 * time.Second
)

// health is what the sink knows of the server: whether it answered the
// last PING, and why not when it did not.
type health struct {
	// down is nil while the server answers, else the reason deliveries
	// are not attempted (wrapping sinks.ErrNotAttempted).
	down atomic.Pointer[error]
	// lastErr is the last probe's error, nil after a good probe.
	lastErr atomic.Pointer[error]
	// lastAnswer is when Redis last answered a batch or a probe, in Unix
	// nanoseconds.
	lastAnswer atomic.Int64
	// wake asks the watcher for a probe now.
	wake chan struct{}
}

var errNotConnectedYet = fmt.Errorf("%w: not connected to Redis yet", sinks.ErrNotAttempted)

func newHealth() *health {
	h := &health{wake: make(chan struct{}, 1)}
	h.down.Store(&errNotConnectedYet)
	return h
}

func (h *health) available() error {
	if err := h.down.Load(); err != nil {
		return *err
	}
	return nil
}

// answered notes a sign of life from the server.
func (h *health) answered() { h.lastAnswer.Store(time.Now().UnixNano()) }

// poke asks for a probe without waiting for it.
func (h *health) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// The setup problems a probe can find: the same for every message, logged
// at error level once per reason.
var (
	errAuthFailed   = errors.New("Redis refused the credentials (check REDIS_USERNAME, REDIS_PASSWORD and the user and password of REDIS_URL)")
	errNoPermission = errors.New("the Redis user may not run PING (grant it +ping and +xadd)")
	errTLSFailed    = errors.New("the TLS handshake with Redis failed (check REDIS_TLS_CA_FILE, the client certificate and that the port speaks TLS)")
)

// setupProblem reports whether a probe's err is a setup problem.
func setupProblem(err error) bool {
	return errors.Is(err, errAuthFailed) || errors.Is(err, errNoPermission) || errors.Is(err, errTLSFailed)
}

// watch probes the server until ctx ends: at once, then every
// probeInterval while it answers (unless batches were answered meanwhile)
// and every retryInterval while it does not, and at once when a delivery
// lost its connection. It logs each change.
func (s *Sink) watch(ctx context.Context) {
	defer close(s.watched)
	h := s.health
	first := true
	for {
		err := s.probe(ctx)
		if ctx.Err() != nil {
			return
		}
		wasUp := h.available() == nil
		if err == nil {
			h.answered()
			h.lastErr.Store(nil)
			h.down.Store(nil)
			if !wasUp {
				s.log.Info("connected to Redis")
			}
		} else {
			prev := h.lastErr.Swap(&err)
			down := fmt.Errorf("%w: Redis does not answer: %w", sinks.ErrNotAttempted, err)
			h.down.Store(&down)
			switch {
			case setupProblem(err) && (prev == nil || (*prev).Error() != err.Error()):
				s.log.Error("Redis refuses the relay's connection; deliveries wait until the setup is fixed", "err", err)
			case setupProblem(err):
			case wasUp || first:
				s.log.Warn("Redis does not answer; deliveries wait until it does", "err", err)
			}
		}
		first = false

		wait := probeInterval
		if err != nil {
			wait = retryInterval
		}
		timer := time.NewTimer(wait)
		for skip := true; skip; {
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-h.wake:
				if err != nil {
					continue // already down: keep to retryInterval
				}
				skip = false
			case <-timer.C:
				if err == nil && time.Since(time.Unix(0, h.lastAnswer.Load())) < probeInterval {
					timer.Reset(probeInterval)
					continue
				}
				skip = false
			}
		}
		timer.Stop()
	}
}

// probe PINGs the server and explains a failure.
func (s *Sink) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, min(s.cfg.Timeout, probeTimeoutMax))
	defer cancel()
	err := s.cl.Ping(ctx).Err()
	if err == nil {
		return nil
	}
	return explain(err)
}

// explain wraps a failure to reach the server with what it means.
func explain(err error) error {
	switch code := redisCode(err); {
	case code == "WRONGPASS" || code == "NOAUTH" ||
		code == "ERR" && (strings.Contains(err.Error(), "invalid password") || strings.Contains(err.Error(), "AUTH") || strings.Contains(err.Error(), "invalid username-password")):
		return fmt.Errorf("%w: %w", errAuthFailed, err)
	case code == "NOPERM":
		return fmt.Errorf("%w: %w", errNoPermission, err)
	case code == "LOADING":
		return fmt.Errorf("Redis is loading its data set into memory: %w", err)
	case code == "BUSY":
		return fmt.Errorf("Redis is busy running a script or function: %w", err)
	case code == "" && sinks.TLSFailure(err) != nil:
		return fmt.Errorf("%w: %w", errTLSFailed, sinks.TLSFailure(err))
	}
	return err
}
