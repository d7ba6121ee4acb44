package sampler

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

func TestSampler_OneClaimPerInterval(t *testing.T) {
	s := New(Config{Every: time.Minute})
	now := time.Now()
	if !s.Due(now) {
		t.Fatal("the first claim is not measured")
	}
	if s.Due(now.Add(59 * time.Second)) {
		t.Error("a second claim within the interval is measured")
	}
	if !s.Due(now.Add(time.Minute)) {
		t.Error("the first claim of the next interval is not measured")
	}
}

// TestMeasure_ReportsWhatTheClaimRead: a claim that walks the table's
// primary key reads index entries and buffers, and Measure reports them
// once the transaction committed.
func TestMeasure_ReportsWhatTheClaimRead(t *testing.T) {
	db := dbtest.New(t)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload) SELECT 'events.a', 'x' FROM generate_series(1, 500)`)
	var entries, buffers int64
	s := New(Config{QuotedSchema: outbox.QuoteSchema(db.Name), Hooks: Hooks{Measured: func(e, b int64) { entries, buffers = e, b }}})
	ctx := context.Background()
	tx, err := db.Pool.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	var n int
	err = s.Measure(ctx, tx, func() error {
		return tx.QueryRow(ctx, "SELECT count(*) FROM (SELECT id FROM "+db.Table("messages")+" WHERE id > 0 ORDER BY id LIMIT 300) AS c").Scan(&n)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 300 || entries < 300 || buffers < 1 {
		t.Errorf("a claim of %d rows through the primary key measured %d index entries and %d buffers; want at least 300 and 1", n, entries, buffers)
	}
}
