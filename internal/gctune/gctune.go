// Package gctune sets the Go collector for the relay's long-running
// commands (run and bench, and the benchmarks' in-process relays).
package gctune

import (
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// The relay's live heap is small and short-lived: the rows in
// flight (RELAY_MAX_IN_FLIGHT_BYTES bounds their payloads) and their
// messages. With Go's default (GOGC=100) the collector ran every few
// megabytes and took a fifth of the relay's CPU in a backlog drain, on the
// two cores it shares with PostgreSQL and the broker; at 400 the relay used
// 0.3 s less CPU per 100k rows (1.32 s to 1.01 s) and its peak RSS went
// from 45 to 80 MB (docs/benchmarks.md). A container's memory limit keeps
// the larger heap in bounds: the collector runs harder as the heap nears
// 90% of it, rather than the kernel killing the relay.
const (
	// gcPercent is the relay's GOGC when GOGC is not set.
	gcPercent = 400
	// memoryLimitShare is the share of the container's memory limit
	// the relay sets as its GOMEMLIMIT when GOMEMLIMIT is not set.
	memoryLimitShare = 0.9
)

// cgroupMemoryLimits are the files holding the memory limit of the cgroup
// the relay runs in, as a container sees them: cgroup v2, then v1.
var cgroupMemoryLimits = []string{
	"/sys/fs/cgroup/memory.max",
	"/sys/fs/cgroup/memory/memory.limit_in_bytes",
}

// Apply applies the relay's collector settings, each unless environ sets
// the Go variable that chooses it: GOGC (gcPercent) and GOMEMLIMIT (a share
// of the container's memory limit, when there is one), and logs them.
func Apply(environ []string, log *slog.Logger) {
	attrs := []any{}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if !isSet(environ, "GOGC") {
		debug.SetGCPercent(gcPercent)
		attrs = append(attrs, "gogc", gcPercent)
	}
	if !isSet(environ, "GOMEMLIMIT") {
		if limit, ok := containerMemoryLimit(cgroupMemoryLimits); ok {
			soft := int64(float64(limit) * memoryLimitShare)
			debug.SetMemoryLimit(soft)
			attrs = append(attrs, "gomemlimit_bytes", soft, "container_memory_limit_bytes", limit)
		}
	}
	if len(attrs) > 0 {
		log.Debug("Go collector tuned (GOGC and GOMEMLIMIT override)", attrs...)
	}
}

// containerMemoryLimit returns the memory limit in the first of files
// that holds one: a number of bytes below 2^62 (cgroup v1 writes a number
// near 2^63 and v2 writes "max" for none).
func containerMemoryLimit(files []string) (int64, bool) {
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n >= 1<<62 {
			continue
		}
		return n, true
	}
	return 0, false
}

// isSet reports whether environ sets name (to any value, empty included).
func isSet(environ []string, name string) bool {
	for _, kv := range environ {
		if k, _, ok := strings.Cut(kv, "="); ok && k == name {
			return true
		}
	}
	return false
}
