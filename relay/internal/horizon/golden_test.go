package horizon_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/relay/internal/horizon"
)

var update = flag.Bool("update", false, "rewrite the golden SQL files under testdata/")

// golden is the text of a statement in its golden file.
func golden(sql string) string { return strings.TrimSpace(sql) + "\n" }

// TestGoldenSQL compares every statement of the readings with
// testdata/<name>.sql, where a reviewer reads and diffs the final SQL. go
// test ./relay/internal/horizon -run TestGoldenSQL -update rewrites the
// files; a stale file fails.
func TestGoldenSQL(t *testing.T) {
	want := map[string]bool{}
	for name, sql := range horizon.Statements() {
		file := filepath.Join("testdata", name+".sql")
		want[filepath.Base(file)] = true
		text := golden(sql)
		if *update {
			if err := os.MkdirAll("testdata", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("%s: %v (go test ./relay/internal/horizon -run TestGoldenSQL -update writes it)", file, err)
			continue
		}
		if string(got) != text {
			t.Errorf("%s is not the statement the reading runs (go test ./relay/internal/horizon -run TestGoldenSQL -update rewrites it; review the diff):\n%s", file, text)
		}
	}
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

// The gauges' statement is the one the relay ran before it read the
// horizon through this package, byte for byte: the relay's golden file of
// it (relay/testdata/shared/gauge_horizon.sql) stays as it is.
func TestGoldenSQL_IsTheRelays(t *testing.T) {
	sql := horizon.Statements()["gauge_horizon"]
	if !strings.HasPrefix(sql, "\nSELECT h.holder,\n") || strings.TrimRight(sql, " \n") != sql {
		t.Errorf("the gauges' statement starts or ends unlike the relay's (a newline, then SELECT; nothing after ORDER BY h.n):\n%q", sql)
	}
	relays, err := os.ReadFile(filepath.Join("..", "..", "testdata", "shared", "gauge_horizon.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if golden(sql) != string(relays) {
		t.Errorf("the gauges' statement is not the relay's relay/testdata/shared/gauge_horizon.sql:\n%s", sql)
	}
}
