package relay

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden SQL files under testdata/")

// TestGoldenSQL renders every statement each mode runs, for the schema
// "outbox", and compares it with testdata/<mode>/<statement>.sql (the
// statements every mode runs alike are under testdata/shared/): a reviewer
// reads and diffs the final SQL there. go test -run TestGoldenSQL -update
// rewrites the files; a stale file fails.
func TestGoldenSQL(t *testing.T) {
	for dir, statements := range goldenStatements() {
		t.Run(dir, func(t *testing.T) {
			want := map[string]bool{}
			for name, sql := range statements {
				file := filepath.Join("testdata", dir, name+".sql")
				want[filepath.Base(file)] = true
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
					t.Errorf("%s: %v (go test ./relay -run TestGoldenSQL -update writes it)", file, err)
					continue
				}
				if string(got) != text {
					t.Errorf("%s is not the statement the relay runs (go test ./relay -run TestGoldenSQL -update rewrites it; review the diff):\n%s", file, text)
				}
			}
			// A file no statement renders any more is stale.
			entries, _ := os.ReadDir(filepath.Join("testdata", dir))
			for _, e := range entries {
				if !want[e.Name()] {
					if *update {
						_ = os.Remove(filepath.Join("testdata", dir, e.Name()))
						continue
					}
					t.Errorf("testdata/%s/%s renders no statement: remove it", dir, e.Name())
				}
			}
		})
	}
}
