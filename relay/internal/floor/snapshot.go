package floor

import (
	"fmt"
	"strconv"
	"strings"
)

// snapshot is a pg_snapshot: transactions below xmin have ended, those at
// xmax or above had not begun, and those listed in xip were in progress.
type snapshot struct {
	xmin, xmax uint64
	xip        []uint64
}

// parseSnapshot reads a pg_snapshot's text form: xmin:xmax:xip,xip,….
func parseSnapshot(s string) (snapshot, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return snapshot{}, fmt.Errorf("snapshot %q: want xmin:xmax:xip", s)
	}
	var snap snapshot
	var err error
	if snap.xmin, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return snapshot{}, fmt.Errorf("snapshot %q: xmin: %w", s, err)
	}
	if snap.xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return snapshot{}, fmt.Errorf("snapshot %q: xmax: %w", s, err)
	}
	if parts[2] != "" {
		for _, x := range strings.Split(parts[2], ",") {
			id, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return snapshot{}, fmt.Errorf("snapshot %q: xip: %w", s, err)
			}
			snap.xip = append(snap.xip, id)
		}
	}
	return snap, nil
}
