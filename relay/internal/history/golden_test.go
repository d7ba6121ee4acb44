package history

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden SQL files under testdata/")

// TestGoldenSQL compares the keeper's statements, rendered for the schema
// "outbox", with testdata/<statement>.sql: a reviewer reads and diffs the
// final SQL there. go test -run TestGoldenSQL -update rewrites the files.
func TestGoldenSQL(t *testing.T) {
	s := Render(`"outbox"`)
	files := map[string]string{"maintain.sql": s.Maintain, "partitions.sql": s.Partitions}
	for table, q := range s.DeleteExpiredFirst {
		files["delete_expired_first_"+table+".sql"] = q
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
			t.Errorf("%s: %v (go test ./relay/internal/history -run TestGoldenSQL -update writes it)", file, err)
			continue
		}
		if string(got) != text {
			t.Errorf("%s is not the statement the keeper runs (go test ./relay/internal/history -run TestGoldenSQL -update rewrites it; review the diff):\n%s", file, text)
		}
	}
	entries, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := files[e.Name()]; !ok {
			t.Errorf("testdata/%s is no statement of the keeper: delete it", e.Name())
		}
	}
}

func TestLookupWidth_IsHalfTheRetentionAtLeastASecond(t *testing.T) {
	for _, c := range []struct{ keep, want time.Duration }{
		{7 * 24 * time.Hour, 84 * time.Hour},
		{time.Hour, 30 * time.Minute},
		{time.Second, time.Second},
		{0, 30 * 24 * time.Hour},
	} {
		if got := LookupWidth(c.keep); got != c.want {
			t.Errorf("LookupWidth(%s) = %s, want %s", c.keep, got, c.want)
		}
	}
}

func TestWidth_IsAQuarterOfTheRetentionAtLeastASecond(t *testing.T) {
	for _, c := range []struct{ keep, want time.Duration }{
		{7 * 24 * time.Hour, 42 * time.Hour},
		{time.Hour, 15 * time.Minute},
		{2 * time.Second, time.Second},
		{0, 30 * 24 * time.Hour},
		{-1, 30 * 24 * time.Hour},
	} {
		if got := Width(c.keep); got != c.want {
			t.Errorf("Width(%s) = %s, want %s", c.keep, got, c.want)
		}
	}
}
