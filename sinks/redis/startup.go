package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Start-up problems CheckStartup reports (outbox_relay_sink_problem).
const (
	ProblemAuthFailed     = "auth_failed"
	ProblemTLSFailed      = "tls_failed"
	ProblemNoPermission   = "no_permission"
	ProblemEvictionPolicy = "eviction_policy"
)

// CheckStartup waits until the server answers, then checks what can be
// known before the first row arrives: that the user may XADD under
// StreamPrefix (an XADD NOMKSTREAM to a key under the prefix that does not
// exist, which Redis checks against the user's ACL and then ignores: it
// writes nothing), and that the server does not evict keys without a time
// to live (maxmemory-policy allkeys-*), which would drop streams and the
// entries they hold. Refused credentials and failed handshakes are
// reported at once; an unreachable server is waited for until ctx ends
// (Available reports it meanwhile).
func (s *Sink) CheckStartup(ctx context.Context) ([]sinks.Problem, error) {
	for s.Available() != nil {
		if p := s.health.lastErr.Load(); p != nil {
			if problem, ok := connectProblem(*p); ok {
				return []sinks.Problem{problem}, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for Redis: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}

	var problems []sinks.Problem
	var b [8]byte
	_, _ = rand.Read(b[:])
	probe := s.cfg.StreamPrefix + "outbox-relay-startup-check-" + hex.EncodeToString(b[:])
	err := s.cl.XAdd(ctx, &goredis.XAddArgs{Stream: probe, NoMkStream: true, ID: "*", Values: []any{"check", "1"}}).Err()
	switch {
	case err == nil, errors.Is(err, goredis.Nil):
	case redisCode(err) == "NOPERM":
		problems = append(problems, sinks.Problem{
			Code:    ProblemNoPermission,
			Message: "the Redis user may not XADD to streams under REDIS_STREAM_PREFIX: every delivery fails and is retried until its ACL allows it (ACL SETUSER … ~prefix* +xadd +ping)",
			Attrs:   []any{"prefix", s.cfg.StreamPrefix, "err", err},
		})
	default:
		return problems, fmt.Errorf("check XADD permission: %w", err)
	}

	info, err := s.cl.Info(ctx, "memory").Result()
	if err != nil {
		// INFO is in @dangerous: a least-privileged user may not run it.
		s.log.Info("cannot read Redis's maxmemory-policy (INFO memory), so the start-up check cannot tell whether it evicts streams; make sure it is noeviction or volatile-*", "err", err)
		return problems, nil
	}
	if policy := infoField(info, "maxmemory_policy"); strings.HasPrefix(policy, "allkeys-") {
		problems = append(problems, sinks.Problem{
			Code:    ProblemEvictionPolicy,
			Message: "Redis's maxmemory-policy evicts any key when memory runs out, streams too: entries reported delivered can be dropped; set maxmemory-policy noeviction (writes then fail with OOM and are retried)",
			Attrs:   []any{"maxmemory_policy", policy},
		})
	}
	return problems, nil
}

// connectProblem says whether a probe's failure is a setup problem that
// waiting will not fix, and which.
func connectProblem(err error) (sinks.Problem, bool) {
	switch {
	case errors.Is(err, errAuthFailed):
		return sinks.Problem{
			Code:    ProblemAuthFailed,
			Message: "Redis refused the relay's credentials: nothing is delivered until REDIS_USERNAME, REDIS_PASSWORD or REDIS_URL is fixed (the sink keeps retrying)",
			Attrs:   []any{"err", err},
		}, true
	case errors.Is(err, errNoPermission):
		return sinks.Problem{
			Code:    ProblemNoPermission,
			Message: "the Redis user may not run PING: nothing is delivered until its ACL allows +ping and +xadd (the sink keeps retrying)",
			Attrs:   []any{"err", err},
		}, true
	case errors.Is(err, errTLSFailed):
		return sinks.Problem{
			Code:    ProblemTLSFailed,
			Message: "the TLS handshake with Redis failed (check REDIS_TLS_CA_FILE, the client certificate and the port): nothing is delivered until it succeeds (the sink keeps retrying)",
			Attrs:   []any{"err", err},
		}, true
	}
	return sinks.Problem{}, false
}

// infoField returns the value of name in an INFO reply, "" when absent.
func infoField(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}
