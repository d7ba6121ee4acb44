package cli

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
)

// A producer that writes ids (INSERT … OVERRIDING SYSTEM VALUE: the id of a
// dead letter, the sequence's next ids) strands nothing: the database gives
// every row its id, other producers' inserts go on, and every row ends
// delivered once or in the dead letters.
func TestProcess_HostileIDsAreTheDatabases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "EVENTS", "events.>")
	p := startProcess(t, relayEnv(db, srv)...)

	// A dead letter to aim at.
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, destination) VALUES ('events.a', 'x', 'nowhere')`)
	waitfor.Condition(t, 20*time.Second, "the first dead letter", func() bool { return db.Count(t, "dead_letters") == 1 })
	var deadID, next int64
	if err := db.Pool.QueryRow(ctx, "SELECT id FROM "+db.Table("dead_letters")).Scan(&deadID); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, "SELECT last_value + 1 FROM "+db.Table("messages_id_seq")).Scan(&next); err != nil {
		t.Fatal(err)
	}

	// One transaction: a row with the dead letter's id, bound for the dead
	// letters too; rows with the sequence's next ids; twenty good rows.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var gotID int64
	if err := tx.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s (id, topic, payload, destination) OVERRIDING SYSTEM VALUE
	    VALUES ($1, 'events.a', 'x', 'nowhere') RETURNING id`, db.Table("messages")), deadID).Scan(&gotID); err != nil {
		t.Fatalf("insert with a chosen id: %v", err)
	}
	if gotID == deadID {
		t.Errorf("the row kept the id %d its producer chose", gotID)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (id, topic, payload) OVERRIDING SYSTEM VALUE
	    SELECT $1::bigint + 100 + i, 'events.squatter', 'x' FROM generate_series(0, 9) AS i`, db.Table("messages")), next); err != nil {
		t.Fatalf("insert with the sequence's next ids: %v", err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (topic, payload) SELECT 'events.good', 'x' FROM generate_series(1, 20)`, db.Table("messages"))); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Another producer's inserts are not refused on messages_pkey.
	relaytest.InsertRows(t, db, 200, "events.other")

	relaytest.WaitDrained(t, db, 30*time.Second)
	relaytest.AssertStreamMatchesArchive(t, db, srv, "EVENTS", 230)
	if n := db.Count(t, "dead_letters"); n != 2 {
		t.Errorf("%d dead letters, want 2", n)
	}
	if m := p.metrics(); metricValue(m, "outbox_relay_settle_errors_total") != 0 {
		t.Errorf("settles failed:\n%s", grepLines(m, "settle_errors"))
	}
}

// A dead letter whose id a pending row holds (inserted before ids were the
// database's alone, or an operator's mistake): the row is dead-lettered
// under a new id, and the other rows of its settle are written down.
func TestProcess_HostileDeadLetterIDTakenIsRenumbered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "EVENTS", "events.>")
	var id int64
	if err := db.Pool.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s (topic, payload, destination) VALUES ('events.a', 'x', 'nowhere') RETURNING id`, db.Table("messages"))).Scan(&id); err != nil {
		t.Fatal(err)
	}
	db.Exec(t, `INSERT INTO %s.dead_letters (id, topic, payload, idempotency_key, created_at, attempts, reason, error)
	    VALUES ($1, 'events.old', 'old', 'old-key', now(), 1, 'failed', 'an older dead letter')`, id)
	relaytest.InsertRows(t, db, 50, "events.good")

	p := startProcess(t, relayEnv(db, srv)...)
	relaytest.WaitDrained(t, db, 30*time.Second)
	relaytest.AssertStreamMatchesArchive(t, db, srv, "EVENTS", 50)
	var newID int64
	var errText string
	if err := db.Pool.QueryRow(ctx, "SELECT id, error FROM "+db.Table("dead_letters")+" WHERE topic = 'events.a'").Scan(&newID, &errText); err != nil {
		t.Fatalf("the row is not in the dead letters: %v", err)
	}
	if newID == id || !strings.Contains(errText, fmt.Sprintf("id %d was a dead letter's already", id)) {
		t.Errorf("dead letter %d: error %q; want a new id and an error that says why", newID, errText)
	}
	if n := db.Count(t, "dead_letters"); n != 2 {
		t.Errorf("%d dead letters, want the older one and the row's", n)
	}
	p.waitLog("dead-lettered rows under new ids")
	if m := p.metrics(); metricValue(m, "outbox_relay_dead_letters_renumbered_total") != 1 {
		t.Errorf("renumbered dead letters not counted:\n%s", grepLines(m, "renumbered"))
	}
}

// A settle refused because of one row (here a trigger a user added to the
// archive) is split until the row is alone: the others are written down
// once; the row stays, is named in an ERROR line, counted, and keeps
// /readyz failing until what refuses it is fixed; then it is delivered.
func TestProcess_HostileSettleRefusedForOneRowIsIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "EVENTS", "events.>")
	db.Exec(t, `CREATE FUNCTION %s.refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
	    BEGIN IF NEW.payload = 'poison' THEN RAISE EXCEPTION 'no poison in my archive'; END IF; RETURN NEW; END $$`)
	db.Exec(t, `CREATE TRIGGER refuse_poison BEFORE INSERT ON %s.archive FOR EACH ROW EXECUTE FUNCTION %s.refuse_poison()`)
	relaytest.InsertRows(t, db, 40, "events.good")
	var poison int64
	if err := db.Pool.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s (topic, payload) VALUES ('events.poison', 'poison') RETURNING id`, db.Table("messages"))).Scan(&poison); err != nil {
		t.Fatal(err)
	}
	relaytest.InsertRows(t, db, 40, "events.good")

	p := startProcess(t, relayEnv(db, srv, "RELAY_LEASE=3s", "NATS_ACK_TIMEOUT=1s")...)
	waitfor.Condition(t, 30*time.Second, "the good rows archived", func() bool { return db.Count(t, "archive") == 80 })
	p.waitLog("the settle of one row is refused")
	if !p.logHas(`"id":` + fmt.Sprint(poison)) {
		t.Errorf("no log line names row %d", poison)
	}
	if n := db.Count(t, "messages_all"); n != 1 {
		t.Errorf("%d rows left in messages, want the poison row alone", n)
	}
	if m := p.metrics(); metricValue(m, "outbox_relay_settle_isolated_rows_total") < 1 {
		t.Errorf("isolated rows not counted:\n%s", grepLines(m, "settle_"))
	}
	waitfor.Condition(t, 10*time.Second, "/readyz to name the row", func() bool {
		code, body := get(t, "http://"+p.addr+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, fmt.Sprint(poison))
	})

	db.Exec(t, `DROP TRIGGER refuse_poison ON %s.archive`)
	relaytest.WaitDrained(t, db, 30*time.Second)
	// The good rows once each, the poison row at least once.
	msgs := srv.Messages(t, "EVENTS")
	seen := map[string]int{}
	for _, m := range msgs {
		seen[m.Header.Get("Nats-Msg-Id")]++
	}
	for key, n := range seen {
		if n > 1 && key != "" {
			var topic string
			_ = db.Pool.QueryRow(ctx, "SELECT topic FROM "+db.Table("archive")+" WHERE idempotency_key = $1", key).Scan(&topic)
			if topic != "events.poison" {
				t.Errorf("message %s (%s) stored %d times", key, topic, n)
			}
		}
	}
	if len(seen) != 81 {
		t.Errorf("%d distinct messages in the stream, want 81", len(seen))
	}
	waitfor.Condition(t, 20*time.Second, "/readyz to recover", func() bool {
		code, _ := get(t, "http://"+p.addr+"/readyz")
		return code == http.StatusOK
	})
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// logHas reports whether a line of the relay's log contains s.
func (p *process) logHas(s string) bool {
	for _, l := range p.log() {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}
