package floor

import (
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testkit/golden"
)

// sampleOldest is the oldest-claimable fragment the golden files are
// rendered with: the relay's for a strategy whose claims may take any row
// (oldestRow), so that testdata/refresh.sql and testdata/rescan.sql read
// as the relay's shared floor statements do.
const sampleOldest = `(SELECT available_at FROM {schema}.messages_all
         WHERE available_at >= @start::timestamptz
         ORDER BY available_at
         LIMIT 1)`

// goldenStatements returns the statements the golden files hold, by file
// name: the floor's statements for the schema "outbox" and sampleOldest,
// and IDFloor.
func goldenStatements() map[string]string {
	s := Render(`"outbox"`, sampleOldest)
	return map[string]string{
		"refresh":  s.Refresh,
		"rescan":   s.Rescan,
		"id_floor": IDFloor,
	}
}

// TestGoldenSQL compares the floor's statements, rendered for the schema
// "outbox" with sampleOldest, with testdata/<statement>.sql: a reviewer
// reads and diffs the final SQL there. go test -run TestGoldenSQL -update
// rewrites the files; a stale file fails.
func TestGoldenSQL(t *testing.T) {
	golden.SQL(t, "testdata", "./relay/internal/floor", "the floor", goldenStatements())
}

// TestRender_FillsOldestBeforeSchema: the fragment's own {schema} is
// filled, and nothing is left of either slot.
func TestRender_FillsOldestBeforeSchema(t *testing.T) {
	s := Render(`"s"`, `(SELECT 1 FROM {schema}.t)`)
	for name, sql := range map[string]string{"Refresh": s.Refresh, "Rescan": s.Rescan} {
		if strings.Contains(sql, "{") {
			t.Errorf("%s holds a slot left unfilled:\n%s", name, sql)
		}
		if !strings.Contains(sql, `(SELECT 1 FROM "s".t)`) {
			t.Errorf("%s lacks the fragment, rendered:\n%s", name, sql)
		}
	}
}
