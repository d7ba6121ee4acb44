package rotation

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden SQL files under testdata/")

// TestGoldenSQL compares the rotator's statements, rendered for the schema
// "outbox", with testdata/<statement>.sql: a reviewer reads and diffs the
// final SQL there. go test -run TestGoldenSQL -update rewrites the files.
func TestGoldenSQL(t *testing.T) {
	s := Render(`"outbox"`)
	files := map[string]string{
		"carry.sql": s.Carry, "empty.sql": s.Empty, "rotate.sql": s.Rotate, "analyze.sql": s.Analyze, "generations.sql": s.Generations,
	}
	for name, sql := range files {
		file := filepath.Join("testdata", name)
		text := strings.TrimSpace(sql) + "\n"
		if *update {
			if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("%s: %v (go test ./relay/internal/rotation -run TestGoldenSQL -update writes it)", file, err)
			continue
		}
		if string(got) != text {
			t.Errorf("%s is not the statement the rotator runs (go test ./relay/internal/rotation -run TestGoldenSQL -update rewrites it; review the diff):\n%s", file, text)
		}
	}
	entries, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := files[e.Name()]; !ok {
			t.Errorf("testdata/%s is no statement of the rotator: delete it", e.Name())
		}
	}
}
