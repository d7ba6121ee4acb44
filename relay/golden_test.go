package relay

import (
	"path/filepath"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testkit/golden"
)

// TestGoldenSQL renders every statement each mode runs, for the schema
// "outbox", and compares it with testdata/<mode>/<statement>.sql (the
// statements every mode runs alike are under testdata/shared/): a reviewer
// reads and diffs the final SQL there. go test -run TestGoldenSQL -update
// rewrites the files; a stale file fails.
func TestGoldenSQL(t *testing.T) {
	for dir, statements := range goldenStatements() {
		t.Run(dir, func(t *testing.T) {
			golden.SQL(t, filepath.Join("testdata", dir), "./relay", "the relay", statements)
		})
	}
}
