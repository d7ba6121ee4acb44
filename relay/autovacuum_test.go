package relay

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// A hot table nobody vacuums slows every claim down and grows: the relay
// says so at start, naming the switch to turn, whether it is the server's
// or the table's.
func TestAutovacuum_OffIsWarnedAbout(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	var serverOn bool
	if err := db.Pool.QueryRow(context.Background(), "SELECT current_setting('autovacuum')::bool").Scan(&serverOn); err != nil {
		t.Fatal(err)
	}
	check := func() string {
		var out bytes.Buffer
		r, err := New(db.Pool, Config{
			Schema: db.Name, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}},
			Logger: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
		if err != nil {
			t.Fatal(err)
		}
		checkAutovacuum(context.Background(), r.pool, r.autovacuum, r.cfg.Schema, r.log)
		return out.String()
	}

	got := check()
	if serverOn && got != "" {
		t.Errorf("autovacuum is on, yet the relay warned: %s", got)
	}
	if !serverOn && !strings.Contains(got, "autovacuum is off on this PostgreSQL server") {
		t.Errorf("the server runs without autovacuum; log %q does not say so", got)
	}

	db.Exec(t, "ALTER TABLE %s.messages SET (autovacuum_enabled = false)")
	got = check()
	want := "autovacuum is disabled for the outbox table"
	if !serverOn {
		want = "autovacuum is off on this PostgreSQL server" // the server's switch comes first
	}
	if !strings.Contains(got, want) || !strings.Contains(got, "level=WARN") {
		t.Errorf("log %q does not warn %q", got, want)
	}
}
