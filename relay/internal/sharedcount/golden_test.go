package sharedcount_test

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testkit/golden"
	"github.com/outbox-relay/outbox-relay/relay/internal/sharedcount"
)

// TestGoldenSQL compares every statement of the protocol with
// testdata/<name>.sql, where a reviewer reads and diffs the final SQL. go
// test ./relay/internal/sharedcount -run TestGoldenSQL -update rewrites the
// files; a stale file fails.
func TestGoldenSQL(t *testing.T) {
	golden.SQL(t, "testdata", "./relay/internal/sharedcount", "the protocol", sharedcount.Statements())
}
