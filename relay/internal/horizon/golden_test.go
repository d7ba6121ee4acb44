package horizon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testkit/golden"
	"github.com/outbox-relay/outbox-relay/relay/internal/horizon"
)

// TestGoldenSQL compares every statement of the readings with
// testdata/<name>.sql, where a reviewer reads and diffs the final SQL. go
// test ./relay/internal/horizon -run TestGoldenSQL -update rewrites the
// files; a stale file fails.
func TestGoldenSQL(t *testing.T) {
	golden.SQL(t, "testdata", "./relay/internal/horizon", "the reading", horizon.Statements())
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
	if golden.Text(sql) != string(relays) {
		t.Errorf("the gauges' statement is not the relay's relay/testdata/shared/gauge_horizon.sql:\n%s", sql)
	}
}
