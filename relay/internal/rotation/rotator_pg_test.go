package rotation

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/relay/internal/horizon"
)

// rotatorOf returns a rotator of db's hot table that rotates as soon as a
// round finds an insert.
func rotatorOf(db *dbtest.Schema, hooks Hooks, log *slog.Logger) *Rotator {
	return New(Config{
		DB:         db.Pool,
		Statements: Render(pgx.Identifier{db.Name}.Sanitize(), ""),
		Every:      time.Millisecond,
		Chunk:      2,
		Logger:     log,
		Hooks:      hooks,
	})
}

// states returns each slot's state and table name, as "slot:state:table".
func states(t *testing.T, r *Rotator) []string {
	t.Helper()
	gens, err := r.Generations(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range gens {
		out = append(out, strings.Join([]string{string(rune('0' + g.Slot)), g.State, g.Table}, ":"))
	}
	return out
}

// where returns the table each row id is in, by id.
func where(t *testing.T, db *dbtest.Schema) map[int64]string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(),
		"SELECT id, tableoid::regclass::text FROM "+db.Table("messages_all")+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]string{}
	for rows.Next() {
		var id int64
		var table string
		if err := rows.Scan(&id, &table); err != nil {
			t.Fatal(err)
		}
		out[id] = table[strings.LastIndex(table, ".")+1:]
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func equal(a, b []string) bool { return strings.Join(a, " ") == strings.Join(b, " ") }

// TestRound_RotatesThenEmptiesTheDrainedGeneration follows rows through a
// rotation: those inserted before stay in the former current table, now
// messages_g1 and draining, and the relay's statements still find them
// through messages_all; rows inserted after land in the new messages, and
// rotate out in turn with the last spare; once the oldest rows are settled
// the next round truncates their drained table and makes it the spare, and
// a generation without an insert does not rotate.
func TestRound_RotatesThenEmptiesTheDrainedGeneration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	var mu sync.Mutex
	var rotated []int64
	emptied := 0
	r := rotatorOf(db, Hooks{
		Rotated: func(g int64) { mu.Lock(); rotated = append(rotated, g); mu.Unlock() },
		Emptied: func(int) { mu.Lock(); emptied++; mu.Unlock() },
	}, nil)
	if got, want := states(t, r), []string{"1:current:messages", "2:spare:messages_g2", "3:spare:messages_g3"}; !equal(got, want) {
		t.Fatalf("after migrating: %v, want %v", got, want)
	}
	r.Round(ctx)
	if len(rotated) != 0 {
		t.Fatalf("an outbox without an insert rotated to %v", rotated)
	}
	db.Exec(t, `INSERT INTO %s.messages (topic, payload) SELECT 't', 'before' FROM generate_series(1, 3)`)
	time.Sleep(2 * time.Millisecond)
	r.Round(ctx)
	if !equal([]string{"1:draining:messages_g1", "2:current:messages"}, states(t, r)[:2]) || len(rotated) != 1 || rotated[0] != 2 {
		t.Fatalf("after an insert and a round: %v, rotated to %v; want slot 2 current as generation 2", states(t, r), rotated)
	}
	db.Exec(t, `INSERT INTO %s.messages (topic, payload) VALUES ('t', 'after')`)
	if got := where(t, db); got[1] != "messages_g1" || got[3] != "messages_g1" || got[4] != "messages" {
		t.Fatalf("rows are in %v, want 1-3 in messages_g1 and 4 in messages", got)
	}
	time.Sleep(2 * time.Millisecond)
	r.Round(ctx) // the old rows wait for their settles: nothing is emptied; row 4 rotates out with slot 2
	if emptied != 0 || db.Count(t, "messages_all") != 4 {
		t.Fatalf("a generation holding rows was emptied (%d) or rows went (%d left)", emptied, db.Count(t, "messages_all"))
	}
	if got, want := states(t, r), []string{"1:draining:messages_g1", "2:draining:messages_g2", "3:current:messages"}; !equal(got, want) {
		t.Fatalf("after an insert into generation 2 and a round: %v, want %v", got, want)
	}
	if n := db.Exec(t, `DELETE FROM %s.messages_all WHERE id <= 3`); n != 3 {
		t.Fatalf("settled %d rows through messages_all, want 3", n)
	}
	time.Sleep(2 * time.Millisecond)
	r.Round(ctx)
	if emptied != 1 {
		t.Fatalf("the drained generation was not emptied: %v", states(t, r))
	}
	// Emptied, slot 1 is the spare again; generation 3 had no insert, so
	// the round did not rotate onto it.
	if got, want := states(t, r), []string{"1:spare:messages_g1", "2:draining:messages_g2", "3:current:messages"}; !equal(got, want) {
		t.Fatalf("after the drained generation was emptied: %v, want %v", got, want)
	}
	if got := where(t, db); len(got) != 1 || got[4] != "messages_g2" {
		t.Fatalf("rows are in %v, want only 4, in messages_g2", got)
	}
	// Each generation's age is read by the database's clock.
	gens, err := r.Generations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gens {
		if g.AgeSeconds < 0 || g.AgeSeconds > 60 {
			t.Errorf("slot %d (%s): age %g s, want the seconds since its state changed in this test", g.Slot, g.State, g.AgeSeconds)
		}
	}
}

// TestCarry_MovesWaitingRowsWithEveryColumn leaves a delayed row, a row in
// backoff, a leased row and a due row in a generation that rotates out: the
// round carries the delayed row and the row in backoff into the spare,
// every column kept (id, attempts, errors, available_at), and leaves the
// leased row to its settle and the due row to the claims.
func TestCarry_MovesWaitingRowsWithEveryColumn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	var carried int64
	r := rotatorOf(db, Hooks{Carried: func(n int64) { carried += n }}, nil)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key, available_at) VALUES
	            ('t', 'delayed', 'k1', now() + interval '1 day'),
	            ('t', 'backoff', 'k2', now()),
	            ('t', 'leased', 'k3', now()),
	            ('t', 'due', 'k4', now())`)
	db.Exec(t, `UPDATE %s.messages SET attempts = 3, last_error = 'boom', first_error = 'first', claim_seq = 3,
	            available_at = now() + interval '1 hour' WHERE payload = 'backoff'`)
	db.Exec(t, `UPDATE %s.messages SET attempts = 1, claim_seq = 1, leased_by = 'relay-a',
	            leased_until = now() + interval '1 hour' WHERE payload = 'leased'`)
	before := map[string]string{}
	rows, err := db.Pool.Query(ctx, "SELECT payload::text, to_jsonb(m)::text FROM "+db.Table("messages")+" AS m")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p, j string
		if err := rows.Scan(&p, &j); err != nil {
			t.Fatal(err)
		}
		before[p] = j
	}
	time.Sleep(2 * time.Millisecond)
	r.Round(ctx) // rotates: slot 1 drains
	r.Round(ctx) // carries
	if carried != 2 {
		t.Fatalf("carried %d rows, want 2 (the delayed one and the one in backoff)", carried)
	}
	got := where(t, db)
	if got[1] != "messages_g3" && got[1] != "messages_g2" || got[2] != got[1] || got[3] != "messages_g1" || got[4] != "messages_g1" {
		t.Fatalf("rows are in %v: want 1 and 2 carried into the spare, 3 (leased) and 4 (due) left in messages_g1", got)
	}
	rows, err = db.Pool.Query(ctx, "SELECT payload::text, to_jsonb(m)::text FROM "+db.Table("messages_all")+" AS m WHERE id <= 2")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p, j string
		if err := rows.Scan(&p, &j); err != nil {
			t.Fatal(err)
		}
		if j != before[`\x`+hexOf(p)] && j != before[p] {
			t.Errorf("row %s changed as it was carried:\n before %s\n after  %s", p, before[p], j)
		}
	}
}

// hexOf returns the hexadecimal form PostgreSQL prints a bytea in.
func hexOf(s string) string {
	var b bytes.Buffer
	for _, c := range []byte(s) {
		b.WriteString(strings.ToLower(string("0123456789ABCDEF"[c>>4])) + strings.ToLower(string("0123456789ABCDEF"[c&15])))
	}
	return b.String()
}

// TestRotate_GivesUpWhileAProducersTransactionIsOpen holds a producer's
// transaction open after its insert: rounds give up on the rotation
// (busy) instead of waiting, warn on the third, and the rotation happens
// in the round after the producer commits; the producer's row is there.
func TestRotate_GivesUpWhileAProducersTransactionIsOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	var logs bytes.Buffer
	busy := 0
	r := rotatorOf(db, Hooks{Busy: func(string) { busy++ }}, slog.New(slog.NewTextHandler(&logs, nil)))
	producer := db.Conn(t)
	tx, err := producer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+db.Table("messages")+" (topic, payload) VALUES ('t', 'open')"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	for range 3 {
		r.Round(ctx)
	}
	if busy != 3 || states(t, r)[0] != "1:current:messages" {
		t.Fatalf("busy %d times, generations %v: want three rounds giving up and slot 1 still current", busy, states(t, r))
	}
	if !strings.Contains(logs.String(), "cannot rotate the hot table") {
		t.Fatalf("no warning after three busy rounds:\n%s", logs.String())
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r.Round(ctx)
	if states(t, r)[0] != "1:draining:messages_g1" || !strings.Contains(logs.String(), "locks are free again") {
		t.Fatalf("after the producer committed: %v\n%s", states(t, r), logs.String())
	}
	if db.Count(t, "messages_all") != 1 {
		t.Fatalf("the producer's row is gone")
	}
}

// TestRotate_ProducersKeepInsertingIntoMessages runs a least-privilege
// producer's prepared insert across rotations: each lands in the table
// that is messages at the time, the producer's grants follow the name (it
// may not insert into a former generation), and INSERT … ON CONFLICT
// (idempotency_key) DO NOTHING still works.
func TestRotate_ProducersKeepInsertingIntoMessages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lp := dbtest.NewLeastPrivilege(t)
	r := rotatorOf(lp.Schema, Hooks{}, nil)
	producer := lp.ConnAs(t, lp.Producer)
	insert := "INSERT INTO " + lp.Table("messages") + " (topic, payload, idempotency_key) VALUES ('t', 'x', $1) ON CONFLICT (idempotency_key) DO NOTHING"
	if _, err := producer.Prepare(ctx, "insert", insert); err != nil {
		t.Fatal(err)
	}
	for i, key := range []string{"a", "b", "c", "d"} {
		if _, err := producer.Exec(ctx, "insert", key); err != nil {
			t.Fatalf("insert %d after %d rotations: %v", i+1, i, err)
		}
		if _, err := producer.Exec(ctx, "insert", key); err != nil {
			t.Fatalf("insert %d again: %v", i+1, err)
		}
		lp.Exec(t, `DELETE FROM %s.messages_all WHERE tableoid <> '%s.messages'::regclass`) // delivered
		time.Sleep(2 * time.Millisecond)
		r.Round(ctx)
	}
	if n := lp.Count(t, "messages_all"); n != 1 {
		t.Fatalf("%d rows pending, want the last one", n)
	}
	var current int64
	if err := lp.Pool.QueryRow(ctx, "SELECT max(generation) FROM "+lp.Table("message_generations")).Scan(&current); err != nil {
		t.Fatal(err)
	}
	if current < 4 {
		t.Fatalf("generation %d after four rounds with inserts, want at least 4", current)
	}
	var former string
	if err := lp.Pool.QueryRow(ctx, "SELECT relid::text FROM "+lp.Table("message_generations")+" WHERE state <> 'current' LIMIT 1").Scan(&former); err != nil {
		t.Fatal(err)
	}
	if _, err := producer.Exec(ctx, "INSERT INTO "+former+" (topic, payload) VALUES ('t', 'x')"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("the producer inserted into %s, a former generation: %v", former, err)
	}
}

// TestEmpty_ASnapshotTakenBeforeSeesTheGenerationEmpty documents what a
// session whose snapshot predates a truncate sees: the emptied generation
// holds no row for it (TRUNCATE is not MVCC-safe), where it would have
// seen the rows delivered after its snapshot.
func TestEmpty_ASnapshotTakenBeforeSeesTheGenerationEmpty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	r := rotatorOf(db, Hooks{}, nil)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload) VALUES ('t', 'x')`)
	time.Sleep(2 * time.Millisecond)
	r.Round(ctx)
	reader := db.Conn(t)
	tx, err := reader.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil { // takes the snapshot, touches no generation
		t.Fatal(err)
	}
	db.Exec(t, `DELETE FROM %s.messages_all`)
	r.Round(ctx)
	if states(t, r)[0] != "1:spare:messages_g1" {
		t.Fatalf("not emptied: %v", states(t, r))
	}
	var n int
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+db.Table("messages_all")).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the snapshot sees %d rows, want none: its generation was truncated", n)
	}
}

// TestCarry_LeavesAProducersDuplicateKeyBehind: a producer inserts a key
// again while its first row is still pending in an older generation
// (each generation has its own unique keys); carrying the second where the
// first is would fail. The round carries the other rows, leaves that one
// where it is, and the hot table keeps rotating.
func TestCarry_LeavesAProducersDuplicateKeyBehind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	var logs bytes.Buffer
	r := rotatorOf(db, Hooks{}, slog.New(slog.NewTextHandler(&logs, nil)))
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key, available_at) VALUES ('t', 'first', 'K', now() + interval '1 hour')`)
	time.Sleep(2 * time.Millisecond)
	r.Round(ctx) // generation 2; K's first row drains in slot 1, then is carried into slot 3
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key, available_at) VALUES
	            ('t', 'again', 'K', now() + interval '1 hour'), ('t', 'other', 'L', now() + interval '1 hour')`)
	time.Sleep(2 * time.Millisecond)
	r.Round(ctx) // generation 3 on slot 3, which holds K's first row; slot 2 drains
	for range 3 {
		time.Sleep(2 * time.Millisecond)
		r.Round(ctx)
	}
	if strings.Contains(logs.String(), "duplicate key") || strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("rounds failed:\n%s", logs.String())
	}
	if n := db.Count(t, "messages_all"); n != 3 {
		t.Fatalf("%d rows pending, want the 3", n)
	}
	var keys int
	if err := db.Pool.QueryRow(ctx, "SELECT count(DISTINCT tableoid) FROM "+db.Table("messages_all")+" WHERE idempotency_key = 'K'").Scan(&keys); err != nil || keys != 2 {
		t.Fatalf("K's two rows are in %d tables (%v), want two: the duplicate left behind", keys, err)
	}
}

// TestRotate_YourTriggersMoveWithHowTheyFire puts four triggers of a user's
// on messages, firing as ORIGIN (the default), ALWAYS, as a REPLICA only,
// and disabled: after two rotations the new messages has each, firing as
// before, the former tables none, and an insert fires the ORIGIN one.
func TestRotate_YourTriggersMoveWithHowTheyFire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	r := rotatorOf(db, Hooks{}, nil)
	db.Exec(t, `CREATE TABLE %s.fired (name text);
	CREATE FUNCTION %s.note_fired() RETURNS trigger LANGUAGE plpgsql AS
	  $$BEGIN INSERT INTO `+db.Table("fired")+` VALUES (TG_NAME); RETURN NULL; END$$;
	CREATE TRIGGER yours_origin AFTER INSERT ON %s.messages FOR EACH ROW EXECUTE FUNCTION %s.note_fired();
	CREATE TRIGGER yours_always AFTER INSERT ON %s.messages FOR EACH ROW EXECUTE FUNCTION %s.note_fired();
	CREATE TRIGGER yours_replica AFTER INSERT ON %s.messages FOR EACH ROW EXECUTE FUNCTION %s.note_fired();
	CREATE TRIGGER yours_disabled AFTER INSERT ON %s.messages FOR EACH ROW EXECUTE FUNCTION %s.note_fired();
	ALTER TABLE %s.messages ENABLE ALWAYS TRIGGER yours_always;
	ALTER TABLE %s.messages ENABLE REPLICA TRIGGER yours_replica;
	ALTER TABLE %s.messages DISABLE TRIGGER yours_disabled`)
	for range 2 {
		db.Exec(t, `INSERT INTO %s.messages (topic, payload) VALUES ('t', 'x')`)
		time.Sleep(2 * time.Millisecond)
		r.Round(ctx)
	}
	if got := states(t, r); !slices.Contains(got, "3:current:messages") {
		t.Fatalf("after two rounds with inserts: %v, want slot 3 current", got)
	}
	rows, err := db.Pool.Query(ctx, `SELECT c.relname || ':' || t.tgname || ':' || t.tgenabled::text
	  FROM pg_trigger AS t JOIN pg_class AS c ON c.oid = t.tgrelid
	 WHERE c.relnamespace = $1::regnamespace AND t.tgname LIKE 'yours%' ORDER BY 1`, db.Name)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"messages:yours_always:A", "messages:yours_disabled:D", "messages:yours_origin:O", "messages:yours_replica:R"}
	if !slices.Equal(got, want) {
		t.Errorf("the triggers after two rotations: %v, want %v", got, want)
	}
	db.Exec(t, `TRUNCATE %s.fired`)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload) VALUES ('t', 'x')`)
	var fired []string
	rows, err = db.Pool.Query(ctx, "SELECT name FROM "+db.Table("fired")+" ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	if fired, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fired, []string{"yours_always", "yours_origin"}) {
		t.Errorf("an insert into the new messages fired %v, want yours_always and yours_origin", fired)
	}
}

// TestRound_TurnsFasterWhileAnOlderTransactionHoldsTheHorizon: a rotator
// whose generations stay current an hour, and turn every millisecond while
// the horizon is older than the current generation. A transaction that
// took its id before the current generation began (a rotation of another
// rotator's made it) holds the horizon: the next rounds rotate, and say
// why. Once it commits, rounds go back to the
// hour; a transaction younger than the current generation does not count.
// The test has a database of its own: other tests' transactions on the
// server's shared database would hold its horizon too.
func TestRound_TurnsFasterWhileAnOlderTransactionHoldsTheHorizon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewInOwnDatabase(t)
	pool := db.Pool
	var logs bytes.Buffer
	r := New(Config{
		DB:          pool,
		Statements:  Render(pgx.Identifier{db.Name}.Sanitize(), horizon.OldestAgeXids),
		Every:       time.Hour,
		PinnedEvery: time.Millisecond,
		Logger:      slog.New(slog.NewTextHandler(&logs, nil)),
	})
	generation := func() int64 {
		t.Helper()
		gens, err := r.Generations(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range gens {
			if g.State == "current" {
				return g.Generation
			}
		}
		t.Fatalf("no current generation: %+v", gens)
		return 0
	}
	// Each round follows an insert whose row is then settled (deleted),
	// so that the drained generation can be emptied and a spare is ready.
	insertThenRound := func(r *Rotator) {
		t.Helper()
		db.Exec(t, "INSERT INTO "+db.Table("messages")+" (topic, payload) VALUES ('t', 'x')")
		db.Exec(t, "DELETE FROM "+db.Table("messages_all"))
		time.Sleep(2 * time.Millisecond)
		r.Round(ctx)
	}
	other := New(Config{DB: pool, Statements: Render(pgx.Identifier{db.Name}.Sanitize(), ""), Every: time.Millisecond})
	hold := func() pgx.Tx {
		t.Helper()
		tx, err := db.Conn(t).Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SELECT txid_current()"); err != nil {
			t.Fatal(err)
		}
		return tx
	}

	first := generation()
	insertThenRound(r)
	if g := generation(); g != first || r.interval() != 10*time.Second {
		t.Fatalf("unpinned: generation %d (want %d), next round in %s: want the hour's pace", g, first, r.interval())
	}

	older := hold()
	insertThenRound(other) // the current generation begins after older
	insertThenRound(r)
	if g := generation(); g != first+2 {
		t.Fatalf("held by a transaction older than the generation: generation %d, want %d\n%s", g, first+2, logs.String())
	}
	if !strings.Contains(logs.String(), "the generations turn faster") || r.interval() != 100*time.Millisecond {
		t.Fatalf("no word of the faster pace, or rounds not sooner (%s):\n%s", r.interval(), logs.String())
	}
	insertThenRound(r)
	if g := generation(); g != first+3 {
		t.Fatalf("still held: generation %d, want %d", g, first+3)
	}
	if err := older.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	younger := hold() // younger than the current generation
	defer younger.Rollback(ctx)
	insertThenRound(r)
	insertThenRound(r)
	if g := generation(); g != first+3 {
		t.Fatalf("held only by a transaction younger than the generation: generation %d, want %d", g, first+3)
	}
	if !strings.Contains(logs.String(), "the generations turn at their usual pace") || r.interval() != 10*time.Second {
		t.Fatalf("no word of the usual pace again, or rounds not back to it (%s):\n%s", r.interval(), logs.String())
	}
}
