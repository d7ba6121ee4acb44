// Package golden keeps the SQL a package runs in golden files under its
// testdata/, where a reviewer reads and diffs the final text of every
// statement, and fails a test when the two part.
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden SQL files under testdata/")

// Text is a statement as its golden file holds it: trimmed, ending in one
// newline.
func Text(sql string) string { return strings.TrimSpace(sql) + "\n" }

// SQL compares each of statements (by name) with the file dir/<name>.sql.
// With -update it writes the files and removes those of dir no statement
// renders; otherwise a missing or different file fails t, and so does a
// stale one. pkg is the package's directory (./relay/admin) and runner
// what runs the statements (the operations), for the messages.
func SQL(t testing.TB, dir, pkg, runner string, statements map[string]string) {
	t.Helper()
	want := map[string]bool{}
	for name, sql := range statements {
		file := filepath.Join(dir, name+".sql")
		want[filepath.Base(file)] = true
		text := Text(sql)
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("%s: %v (go test %s -run TestGoldenSQL -update writes it)", file, err, pkg)
			continue
		}
		if string(got) != text {
			t.Errorf("%s is not the statement %s runs (go test %s -run TestGoldenSQL -update rewrites it; review the diff):\n%s", file, runner, pkg, text)
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() || want[e.Name()] {
			continue
		}
		if *update {
			_ = os.Remove(filepath.Join(dir, e.Name()))
			continue
		}
		t.Errorf("%s renders no statement of %s: remove it (go test %s -run TestGoldenSQL -update does)", filepath.Join(dir, e.Name()), runner, pkg)
	}
}
