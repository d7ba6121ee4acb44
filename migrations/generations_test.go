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

// A schema of version 23 in partitioned mode with a backlog of 50,000
// rows migrates in place while a producer inserts and a relay-like writer
// settles (migration 24): no write fails, every row is pending as before,
// now read through messages_all, the old table is the current generation
// with its indexes and the spares have the mode's indexes too, a role
// granted the old table reads messages_all, and the first rotation hands
// producers a new messages that takes their inserts.
func TestApply_TheHotTableBecomesAGenerationWhileProducersInsert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn, q := schemaAt(t, 23,
		`UPDATE %[1]s.relay_mode SET mode = 'partitioned'`,
		`SELECT %[1]s.messages_apply_mode()`,
		`INSERT INTO %[1]s.messages (topic, payload, key) SELECT 't', 'x', 'k' || (i %% 100) FROM generate_series(1, 50000) AS i`)
	reader := dbtest.NewRole(t, "reader")
	if _, err := conn.Exec(ctx, "GRANT USAGE ON SCHEMA "+q+" TO "+pgx.Identifier{reader.Name}.Sanitize()+";"+
		"GRANT SELECT, UPDATE, DELETE ON "+q+".messages TO "+pgx.Identifier{reader.Name}.Sanitize()); err != nil {
		t.Fatal(err)
	}

	pool := db.NewPool(t, "writers")
	stop := make(chan struct{})
	var inserted, settled atomic.Int64
	var mu sync.Mutex
	var failed []error
	fail := func(err error) {
		mu.Lock()
		failed = append(failed, err)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	wg.Go(func() { // a producer: one row per transaction
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := pool.Exec(ctx, `INSERT INTO `+q+`.messages (topic, payload, key) VALUES ('t', 'during', 'k1')`); err != nil {
				fail(err)
				return
			}
			inserted.Add(1)
		}
	})
	wg.Go(func() { // a settle of the version before: by id, from messages
		for id := int64(1); ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := pool.Exec(ctx, `DELETE FROM `+q+`.messages WHERE id = $1`, id); err != nil {
				fail(err)
				return
			}
			settled.Add(1)
		}
	})
	for inserted.Load() < 10 || settled.Load() < 10 {
		time.Sleep(time.Millisecond)
	}
	if n, err := migrations.Apply(ctx, conn, db.Name); err != nil || n != int(migrations.Latest())-23 {
		t.Fatalf("Apply = %d, %v", n, err)
	}
	during := inserted.Load()
	for inserted.Load() < during+10 && len(failed) == 0 {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("a write failed while the schema migrated: %v", failed[0])
	}
	want := 50000 + int(inserted.Load()) - int(settled.Load())
	if got := db.Count(t, "messages_all"); got != want {
		t.Errorf("messages_all holds %d rows, want %d (50000 + %d inserted - %d settled)", got, want, inserted.Load(), settled.Load())
	}
	if got := db.Count(t, "messages"); got != want {
		t.Errorf("messages, the current generation, holds %d rows, want all %d", got, want)
	}
	var states []string
	rows, err := conn.Query(ctx, "SELECT slot || ':' || state || ':' || table_name FROM "+q+".messages_generations() ORDER BY slot")
	if err != nil {
		t.Fatal(err)
	}
	if states, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(states) != 3 || states[0] != "1:current:messages" || states[1] != "2:spare:messages_g2" || states[2] != "3:spare:messages_g3" {
		t.Errorf("generations %v, want slot 1 current (the old table) and two spares", states)
	}
	for _, index := range []string{"messages_bucket_due_idx", "messages_g2_bucket_due_idx", "messages_g3_bucket_due_idx",
		"messages_g2_pkey", "messages_g3_idempotency_key_key", "messages_g3_due_idx"} {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", q+"."+index).Scan(&ok); err != nil || !ok {
			t.Errorf("index %s missing after the upgrade (%v)", index, err)
		}
	}

	rconn, err := pgx.Connect(ctx, reader.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer rconn.Close(ctx)
	var n int
	if err := rconn.QueryRow(ctx, "SELECT count(*) FROM "+q+".messages_all WHERE key = 'k1'").Scan(&n); err != nil || n == 0 {
		t.Errorf("a role granted messages before the upgrade reads messages_all after: %d rows, %v", n, err)
	}

	var generation *int64
	if err := conn.QueryRow(ctx, "SELECT generation FROM "+q+".messages_rotate('0 s', '1 s')").Scan(&generation); err != nil || generation == nil || *generation != 2 {
		t.Fatalf("the first rotation after the upgrade: generation %v, %v", generation, err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+q+`.messages (topic, payload, key) VALUES ('t', 'after', 'k1')`); err != nil {
		t.Fatal(err)
	}
	if got := db.CountWhere(t, "messages", "payload = 'after'"); got != 1 || db.Count(t, "messages") != 1 {
		t.Errorf("the new messages holds %d rows, %d of them the insert after the rotation; want just it", db.Count(t, "messages"), got)
	}
	if got := db.Count(t, "messages_all"); got != want+1 {
		t.Errorf("messages_all holds %d rows after the rotation, want %d", got, want+1)
	}
}
