package rotation

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testkit/golden"
)

// TestGoldenSQL compares the rotator's statements, rendered for the schema
// "outbox", with testdata/<statement>.sql: a reviewer reads and diffs the
// final SQL there. go test -run TestGoldenSQL -update rewrites the files.
func TestGoldenSQL(t *testing.T) {
	s := Render(`"outbox"`)
	golden.SQL(t, "testdata", "./relay/internal/rotation", "the rotator", map[string]string{
		"carry": s.Carry, "empty": s.Empty, "rotate": s.Rotate, "analyze": s.Analyze, "generations": s.Generations,
	})
}
