package migrations_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// A schema of version 20 with ten days of history migrates in place while
// a writer archives rows and records keys as a relay's settles do
// (migrations 21 to 23): no write fails, every row is still there, the old
// tables are the first partitions of partitioned tables of their names,
// the keys recorded before and during the upgrade are still found, and a
// role granted the old table may read the new one.
func TestApply_HistoryBecomesPartitionedInPlaceWhileTheRelaySettles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn, q := schemaAt(t, 20,
		`INSERT INTO %[1]s.archive (id, topic, payload, idempotency_key, created_at, attempts, delivered_at)
		 SELECT i, 't', 'x', 'k' || i, now(), 1, now() - (i %% 10) * interval '1 day' FROM generate_series(1, 50000) AS i`,
		`INSERT INTO %[1]s.delivered_keys (idempotency_key, delivered_at)
		 SELECT 'k' || i, now() - (i %% 10) * interval '1 day' FROM generate_series(1, 50000) AS i`)
	reader := dbtest.NewRole(t, "reader")
	if _, err := conn.Exec(ctx, "GRANT USAGE ON SCHEMA "+q+" TO "+pgx.Identifier{reader.Name}.Sanitize()+";"+
		"GRANT SELECT ON "+q+".archive TO "+pgx.Identifier{reader.Name}.Sanitize()); err != nil {
		t.Fatal(err)
	}

	// The writer: one settle-like transaction after the other.
	pool := db.NewPool(t, "settles")
	stop := make(chan struct{})
	var written atomic.Int64
	var slowest atomic.Int64
	var failed []error
	var writing atomic.Bool
	writing.Store(true)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer writing.Store(false)
		for i := int64(1); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			began := time.Now()
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO `+q+`.archive (id, topic, payload, idempotency_key, created_at, attempts)
				                           VALUES ($1, 't', 'x', 'w' || $1::bigint, now(), 1)`, 100000+i); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `INSERT INTO `+q+`.delivered_keys (idempotency_key) VALUES ('w' || $1::bigint)`, 100000+i)
				return err
			})
			if err != nil {
				failed = append(failed, err)
				return
			}
			written.Add(1)
			slowest.Store(max(slowest.Load(), int64(time.Since(began))))
		}
	})
	for written.Load() < 10 {
		time.Sleep(time.Millisecond)
	}
	if n, err := migrations.Apply(ctx, conn, db.Name); err != nil || n != int(migrations.Latest())-20 {
		t.Fatalf("Apply = %d, %v", n, err)
	}
	during := written.Load()
	for written.Load() < during+10 && writing.Load() {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("a settle failed while the schema migrated: %v", failed[0])
	}
	t.Logf("%d settles, the slowest %s", written.Load(), time.Duration(slowest.Load()))

	want := 50000 + int(written.Load())
	for _, table := range []string{"archive", "delivered_keys"} {
		if got := db.Count(t, table); got != want {
			t.Errorf("%s holds %d rows after the upgrade, want the 50000 before and the %d written during it", table, got, written.Load())
		}
		var kind string
		var first int
		if err := conn.QueryRow(ctx, `SELECT c.relkind::text, (SELECT count(*) FROM `+q+`.`+table+`_before_partitions)
		                                FROM pg_class AS c WHERE c.oid = $1::regclass`, q+"."+table).Scan(&kind, &first); err != nil {
			t.Fatal(err)
		}
		if kind != "p" || first < 50000 {
			t.Errorf("%s is of kind %q with %d rows in its first partition, want a partitioned table (p) whose first partition holds the 50000 rows before", table, kind, first)
		}
	}
	for _, key := range []string{"k17", "w100005"} {
		if n := db.CountWhere(t, "delivered_keys", "idempotency_key = '"+key+"'"); n != 1 {
			t.Errorf("delivered key %s found %d times after the upgrade, want once", key, n)
		}
	}
	rconn, err := pgx.Connect(ctx, reader.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer rconn.Close(ctx)
	var n int
	if err := rconn.QueryRow(ctx, "SELECT count(*) FROM "+q+".archive WHERE id = 17").Scan(&n); err != nil || n != 1 {
		t.Errorf("a role granted the archive before the upgrade reads it after: %d rows, %v", n, err)
	}
}
