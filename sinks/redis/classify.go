package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// classify turns the failure of one XADD into its row's outcome. Only what
// no retry can fix is permanent: a key of another type under the stream's
// name (it stays that type until someone deletes it), a stream that has
// used up its ids. Everything else is transient, with a text that says
// what to do: errors that depend on the server's state (OOM, LOADING, BUSY,
// READONLY, MISCONF, MASTERDOWN, TRYAGAIN, CLUSTERDOWN, NOREPLICAS), on its
// setup (NOPERM, NOAUTH, WRONGPASS, MOVED and ASK from a cluster node), a
// lost or slow connection, an error code this sink does not know.
func (s *Sink) classify(stream string, err error) error {
	msg := err.Error()
	switch redisCode(err) {
	case "WRONGTYPE":
		return sinks.Permanent(fmt.Errorf("Redis key %q holds a value that is not a stream: %w", clip(stream), err))
	case "ERR":
		if strings.Contains(msg, "exhausted the last possible ID") || strings.Contains(msg, "equal or smaller than the target stream top item") {
			return sinks.Permanent(fmt.Errorf("Redis stream %q takes no more entries: %w", clip(stream), err))
		}
	case "OOM":
		return fmt.Errorf("Redis is out of memory (maxmemory) and refuses writes; retrying: %w", err)
	case "LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS":
		return fmt.Errorf("Redis cannot take writes now; retrying: %w", err)
	case "READONLY":
		return fmt.Errorf("REDIS_URL reaches a read-only replica (a failover in progress, or the wrong address); retrying: %w", err)
	case "MISCONF":
		return fmt.Errorf("Redis refuses writes because it cannot save its data (see its log); retrying: %w", err)
	case "MOVED", "ASK":
		return fmt.Errorf("REDIS_URL reaches a node of a Redis Cluster, which the sink does not route for (use a single server, a replicated primary behind one address, or a cluster proxy); retrying: %w", err)
	case "NOPERM":
		return fmt.Errorf("the Redis user may not XADD to stream %q: grant it +xadd and a key pattern that covers REDIS_STREAM_PREFIX (ACL SETUSER … ~prefix* +xadd); retrying: %w", clip(stream), err)
	case "NOAUTH", "WRONGPASS":
		return fmt.Errorf("Redis refuses the relay's credentials; retrying: %w", err)
	case "":
		switch {
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
			return fmt.Errorf("XADD to %q not answered by Redis in time: %w", clip(stream), err)
		case sinks.TLSFailure(err) != nil:
			return fmt.Errorf("TLS with Redis failed; retrying: %w", err)
		}
		return fmt.Errorf("XADD to %q: %w", clip(stream), err)
	}
	return fmt.Errorf("XADD to %q: %w", clip(stream), err)
}

// connectionFailure reports whether err says the connection or the server,
// rather than the message, failed: the probe should look at once.
func connectionFailure(err error) bool {
	switch redisCode(err) {
	case "":
		return !errors.Is(err, context.Canceled)
	case "LOADING", "BUSY", "NOAUTH", "WRONGPASS", "MASTERDOWN":
		return true
	}
	return false
}
