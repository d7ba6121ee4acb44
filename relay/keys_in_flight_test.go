package relay

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// TestKeysInFlight_SpareLookupsAndChangeNothingClaimed: keys of 5 rows
// each; the first row of k1 to k39 in flight in this relay, the first of k0
// backing off, the first of k41 delivered (deleted), k40's rows all due. A
// claim told that every one of them has rows in flight here (k0, k40 and
// k41 wrongly: the lookup it skips for them would have found no row of
// theirs in flight, for k40 and k41 no row at all below their first
// claimed, and a key without rows too) takes the same rows and holds back
// the same key as a claim told none, k0, and reads fewer entries of
// messages_key_idx: the keys named are a hint that spares a lookup, not a
// fact the claim rests on.
func TestKeysInFlight_SpareLookupsAndChangeNothingClaimed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModePartitioned)
	r, err := New(db.Pool, Config{Schema: db.Name, Mode: outbox.ModePartitioned, Sinks: map[string]sinks.Sink{"nats": &sinktest.Func{}}})
	if err != nil {
		t.Fatal(err)
	}
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key)
SELECT 'events.a', 'x', 'k' || k FROM generate_series(1, 5) AS s, generate_series(0, 41) AS k ORDER BY s, k`)
	firstOfEach := `(SELECT min(id) FROM ` + db.Table("messages") + ` GROUP BY key)`
	db.Exec(t, `UPDATE %s.messages SET leased_by = '`+r.cfg.ID+`', leased_until = now() + interval '1 hour', claim_seq = 1, attempts = 1
 WHERE key NOT IN ('k0', 'k40', 'k41') AND id IN `+firstOfEach)
	db.Exec(t, `UPDATE %s.messages SET available_at = now() + interval '1 hour' WHERE key = 'k0' AND id IN `+firstOfEach)
	db.Exec(t, `DELETE FROM %s.messages WHERE key = 'k41' AND id IN `+firstOfEach)
	db.Exec(t, `UPDATE %s.buckets SET owner = '`+r.cfg.ID+`', epoch = 1, lease_until = now() + interval '1 hour'`)
	db.Exec(t, `ANALYZE %s.messages`)

	m := r.mode.(*partitioned)
	var buckets, shares []int32
	var epochs []int64
	for b := range int32(64) {
		buckets, epochs, shares = append(buckets, b), append(epochs, 1), append(shares, 1000)
	}
	named := []string{"zz"}
	for k := range 42 {
		named = append(named, "k"+strconv.Itoa(k))
	}
	claim := func(keys string) (ids []int64, held []string, entries int64) {
		t.Helper()
		tx := planTx(t, db)
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, r.engine.claims.plan); err != nil { // the claims' generic plan
			t.Fatal(err)
		}
		args := m.bucketsClaimArgs(claimRequest{limit: 1000, bytes: 1 << 30, closed: []string{}}, buckets, epochs, shares)
		args["keys_in_flight"] = keys
		read := func() int64 { return indexEntriesRead(t, tx, db.Table("messages_key_idx")) }
		before := read()
		ids, held = claimedAndHeld(t, tx, m.claims[0], args)
		return ids, held, read() - before
	}
	plainIDs, plainHeld, plainEntries := claim("{}")
	hintedIDs, hintedHeld, hintedEntries := claim(keysInFlight(named))
	t.Logf("entries of messages_key_idx read: %d told no key, %d told the keys", plainEntries, hintedEntries)
	if len(plainIDs) != 39*4+5+4 || !slices.Equal(plainHeld, []string{"k0"}) {
		t.Fatalf("told no key, the claim took %d rows and held back %v; want the 156 rows behind k1-k39's rows in flight, k40's 5 and k41's 4, and k0 held back", len(plainIDs), plainHeld)
	}
	if !slices.Equal(hintedIDs, plainIDs) || !slices.Equal(hintedHeld, plainHeld) {
		t.Errorf("told the keys in flight, the claim took %d rows and held back %v; want the same as told none (%d rows, %v)", len(hintedIDs), hintedHeld, len(plainIDs), plainHeld)
	}
	if hintedEntries >= plainEntries {
		t.Errorf("told the keys in flight, the claim read %d entries of messages_key_idx, want fewer than the %d it read told none", hintedEntries, plainEntries)
	}
}

// claimedAndHeld runs the claim statement claim with args in tx and returns
// the ids of the rows it leased, in id order, and the keys it held back,
// sorted.
func claimedAndHeld(t *testing.T, tx pgx.Tx, claim string, args pgx.StrictNamedArgs) (ids []int64, held []string) {
	t.Helper()
	rows, err := tx.Query(context.Background(), claim, args)
	if err != nil {
		t.Fatal(err)
	}
	cols, err := claimColumnsOf(rows.FieldDescriptions())
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		if v[cols.id] != nil {
			ids = append(ids, v[cols.id].(int64))
		} else {
			held = append(held, v[cols.heldKey].(string))
		}
	}
	if rows.Close(); rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	slices.Sort(ids)
	slices.Sort(held)
	return ids, held
}

// TestKeysInFlight_TheObjectNamesTheKeysAsTheyAreAndLeavesOutTheRest: the
// keys a claim is told of are written as their bytes, " and \ escaped and
// nothing else (a \u escape above ASCII fails in a database whose encoding
// is not UTF-8), and PostgreSQL reads each name back as the key; a key too
// long, not UTF-8 or with a control character is left out, and so are the
// keys past the object's budget.
func TestKeysInFlight_TheObjectNamesTheKeysAsTheyAreAndLeavesOutTheRest(t *testing.T) {
	db := dbtest.New(t)
	keys := []string{"a", `b"c\d`, "é\u2028x<>&", "line\u2028sep", strings.Repeat("y", keyInFlightBytesMax)}
	left := []string{strings.Repeat("x", keyInFlightBytesMax+1), "tab\tkey", "bad\xffutf8"}
	got := keysInFlight(append(slices.Clone(keys), left...))
	if strings.Contains(got, `\u`) {
		t.Errorf("keysInFlight = %s: an escape \\u", got)
	}
	var names []string
	if err := db.Pool.QueryRow(context.Background(), `SELECT array_agg(k ORDER BY k COLLATE "C") FROM jsonb_object_keys($1::text::jsonb) AS k`, got).Scan(&names); err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(keys)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("PostgreSQL reads the names %q, want %q", names, want)
	}

	var many []string
	for i := range 1000 {
		many = append(many, strings.Repeat("z", 200)+strconv.Itoa(i))
	}
	if n := len(keysInFlight(many)); n > keysInFlightBytesMax {
		t.Errorf("the object of 1,000 keys of 200 bytes holds %d bytes, over keysInFlightBytesMax (%d)", n, keysInFlightBytesMax)
	}
}
