package rotation

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testkit/golden"
)

// TestGoldenSQL compares the rotator's statements, rendered for the schema
// "outbox" (the horizon's age left as {horizon_age}: the relay passes
// relay/internal/horizon's OldestAgeXids, whose golden file is that
// package's), with testdata/<statement>.sql: a reviewer reads and diffs the
// final SQL there. go test -run TestGoldenSQL -update rewrites the files.
func TestGoldenSQL(t *testing.T) {
	s := Render(`"outbox"`, "{horizon_age}")
	golden.SQL(t, "testdata", "./relay/internal/rotation", "the rotator", map[string]string{
		"carry": s.Carry, "empty": s.Empty, "rotate": s.Rotate, "analyze": s.Analyze, "generations": s.Generations,
		"pinned": s.Pinned,
	})
}
