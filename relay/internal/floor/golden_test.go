package floor

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden SQL files under testdata/")

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
		"refresh.sql":  s.Refresh,
		"rescan.sql":   s.Rescan,
		"id_floor.sql": IDFloor,
	}
}

// TestGoldenSQL compares the floor's statements, rendered for the schema
// "outbox" with sampleOldest, with testdata/<statement>.sql: a reviewer
// reads and diffs the final SQL there. go test -run TestGoldenSQL -update
// rewrites the files; a stale file fails.
func TestGoldenSQL(t *testing.T) {
	want := map[string]bool{}
	for name, sql := range goldenStatements() {
		file := filepath.Join("testdata", name)
		want[name] = true
		text := strings.TrimSpace(sql) + "\n"
		if *update {
			if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("%s: %v (go test ./relay/internal/floor -run TestGoldenSQL -update writes it)", file, err)
			continue
		}
		if string(got) != text {
			t.Errorf("%s is not the statement the floor runs (go test ./relay/internal/floor -run TestGoldenSQL -update rewrites it; review the diff):\n%s", file, text)
		}
	}
	// A file no statement renders any more is stale.
	entries, _ := os.ReadDir("testdata")
	for _, e := range entries {
		if !want[e.Name()] {
			if *update {
				_ = os.Remove(filepath.Join("testdata", e.Name()))
				continue
			}
			t.Errorf("testdata/%s renders no statement: remove it", e.Name())
		}
	}
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
