package relay

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

func TestRetention_DeletesOnlyExpiredRowsInChunks(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	// 12k archived rows a week and a day old, 10 fresh; the same for keys.
	db.Exec(t, `INSERT INTO %s.archive (id, topic, payload, idempotency_key, created_at, attempts, delivered_at)
	            SELECT i, 't', 'x', 'k' || i, now(), 1, now() - CASE WHEN i <= 12000 THEN interval '8 days' ELSE interval '1 hour' END
	              FROM generate_series(1, 12010) AS i`)
	db.Exec(t, `INSERT INTO %s.delivered_keys (idempotency_key, delivered_at)
	            SELECT 'k' || i, now() - CASE WHEN i <= 12000 THEN interval '8 days' ELSE interval '1 hour' END
	              FROM generate_series(1, 12010) AS i`)
	r, err := New(db.Pool, Config{
		Schema: db.Name, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}},
		ArchiveRetention: 7 * 24 * time.Hour, DedupRetention: 7 * 24 * time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	r.retention.history.Maintain(context.Background())
	if got := db.Count(t, "archive"); got != 10 {
		t.Errorf("archive holds %d rows after retention, want the 10 fresh ones", got)
	}
	if got := db.Count(t, "delivered_keys"); got != 10 {
		t.Errorf("delivered_keys holds %d rows after retention, want 10", got)
	}
	if got := testutil.ToFloat64(r.cfg.Metrics.RetentionDeleted.WithLabelValues("archive")); got != 12000 {
		t.Errorf("retention_deleted_total{table=archive} = %v, want 12000", got)
	}

	// A negative retention keeps everything.
	db.Exec(t, `UPDATE %s.archive SET delivered_at = now() - interval '1000 days'`)
	r, err = New(db.Pool, Config{
		Schema: db.Name, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}},
		ArchiveRetention: -1, DedupRetention: 7 * 24 * time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	r.retention.history.Maintain(context.Background())
	if got := db.Count(t, "archive"); got != 10 {
		t.Errorf("archive holds %d rows with retention off, want 10", got)
	}
}

func TestBackoff_DoublesWithJitterUpToTheMaximum(t *testing.T) {
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 30: time.Minute} {
		for range 50 {
			d := backoffDelay(attempt, time.Second, time.Minute)
			if d < want*8/10 || d > want*12/10 || d > time.Minute {
				t.Fatalf("backoff(%d) = %s, want %s ± 20%% and at most the 1m maximum", attempt, d, want)
			}
		}
	}
}

// The janitor's statements need no more than least_privilege.sql grants
// the relay's role: its errors are only logged, so the test looks at what
// is left.
func TestRetention_RunsAsTheLeastPrivilegeRelayRole(t *testing.T) {
	t.Parallel()
	lp := dbtest.NewLeastPrivilege(t)
	lp.Exec(t, `INSERT INTO %s.archive (id, topic, payload, idempotency_key, created_at, attempts, delivered_at)
	            VALUES (1, 't', 'x', 'k1', now(), 1, now() - interval '8 days'), (2, 't', 'x', 'k2', now(), 1, now())`)
	lp.Exec(t, `INSERT INTO %s.delivered_keys (idempotency_key, delivered_at) VALUES ('k1', now() - interval '8 days'), ('k2', now())`)
	lp.Exec(t, `INSERT INTO %s.relays (id, version, mode, last_seen) VALUES ('gone', 'test', 'unordered', now() - interval '3 days')`)
	// A keyed row waiting behind no row of its key, as the repair exists
	// to find.
	lp.Exec(t, `INSERT INTO %s.messages (topic, payload, key) VALUES ('t', 'x', 'order-1')`)
	lp.Exec(t, `UPDATE %s.messages SET waiting = true`)
	var failures bytes.Buffer
	r, err := New(lp.PoolAs(t, lp.Relay), Config{
		Schema: lp.Name, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}}, Mode: outbox.ModeOrdered,
		ArchiveRetention: 7 * 24 * time.Hour, DedupRetention: 7 * 24 * time.Hour,
		Logger: slog.New(slog.NewTextHandler(&failures, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r.retention.history.Maintain(ctx)
	if _, err := r.pool.Exec(ctx, r.retention.relaysForget, pgx.StrictNamedArgs{"gone": forgetAfter}); err != nil {
		t.Errorf("forget relays: %v", err)
	}
	r.mode.(*ordered).repair(ctx)
	if got := lp.Count(t, "archive"); got != 1 {
		t.Errorf("archive holds %d rows after retention, want the fresh one", got)
	}
	if got := lp.Count(t, "delivered_keys"); got != 1 {
		t.Errorf("delivered_keys holds %d rows after retention, want the fresh one", got)
	}
	if got := lp.Count(t, "relays"); got != 0 {
		t.Errorf("relays holds %d rows, want the one gone for days forgotten", got)
	}
	if got := lp.CountWhere(t, "messages_all", "waiting"); got != 0 {
		t.Errorf("%d rows still wait behind no row of their key after the repair, want 0", got)
	}
	if strings.Contains(failures.String(), "err=") {
		t.Errorf("the relay's role met errors:\n%s", failures.String())
	}
}
