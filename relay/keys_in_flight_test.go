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

// TestKeysInFlight_SpareLookupsAndChangeNothingClaimed: 40 keys of 5 rows
// each, the first row of k1 to k39 in flight in this relay, the first of k0
// backing off. A claim told which keys have rows in flight here (every key
// of them, k0 too, wrongly, and a key without rows) takes the same rows and
// holds back the same key as a claim told none, k0, and reads fewer entries
// of messages_key_idx: the keys named are a hint that spares a lookup, not
// a fact the claim rests on.
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
SELECT 'events.a', 'x', 'k' || k FROM generate_series(1, 5) AS s, generate_series(0, 39) AS k ORDER BY s, k`)
	firstOfEach := `(SELECT min(id) FROM ` + db.Table("messages") + ` GROUP BY key)`
	db.Exec(t, `UPDATE %s.messages SET leased_by = '`+r.cfg.ID+`', leased_until = now() + interval '1 hour', claim_seq = 1, attempts = 1
 WHERE key <> 'k0' AND id IN `+firstOfEach)
	db.Exec(t, `UPDATE %s.messages SET available_at = now() + interval '1 hour' WHERE key = 'k0' AND id IN `+firstOfEach)
	db.Exec(t, `UPDATE %s.buckets SET owner = '`+r.cfg.ID+`', epoch = 1, lease_until = now() + interval '1 hour'`)
	db.Exec(t, `ANALYZE %s.messages`)

	m := r.mode.(*partitioned)
	var buckets, shares []int32
	var epochs []int64
	for b := range int32(64) {
		buckets, epochs, shares = append(buckets, b), append(epochs, 1), append(shares, 1000)
	}
	named := []string{"zz"}
	for k := range 40 {
		named = append(named, "k"+strconv.Itoa(k))
	}
	claim := func(keys []byte) (ids []int64, held []string, entries int64) {
		t.Helper()
		tx := planTx(t, db)
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, r.engine.claims.plan); err != nil { // the claims' generic plan
			t.Fatal(err)
		}
		args := m.bucketsClaimArgs(claimRequest{limit: 1000, bytes: 1 << 30, closed: []string{}}, buckets, epochs, shares)
		args["keys_in_flight"] = keys
		read := func() (v int64) {
			t.Helper()
			if err := tx.QueryRow(ctx, "SELECT pg_stat_get_xact_tuples_returned($1::regclass)", db.Table("messages_key_idx")).Scan(&v); err != nil {
				t.Fatal(err)
			}
			return v
		}
		before := read()
		ids, held = claimedAndHeld(t, tx, m.claims[0], args)
		return ids, held, read() - before
	}
	plainIDs, plainHeld, plainEntries := claim([]byte("{}"))
	hintedIDs, hintedHeld, hintedEntries := claim(keysInFlight(named))
	t.Logf("entries of messages_key_idx read: %d told no key, %d told the keys", plainEntries, hintedEntries)
	if len(plainIDs) != 39*4 || !slices.Equal(plainHeld, []string{"k0"}) {
		t.Fatalf("told no key, the claim took %d rows and held back %v; want the 156 rows behind k1-k39's rows in flight, and k0", len(plainIDs), plainHeld)
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

// TestKeysInFlight_LongKeysAreLeftOut: the keys a claim is told of are the
// short ones; a longer key is looked up instead, so that a producer's long
// keys cannot make every claim carry them.
func TestKeysInFlight_LongKeysAreLeftOut(t *testing.T) {
	long := strings.Repeat("x", keyInFlightBytesMax+1)
	got := string(keysInFlight([]string{"a", `b"c`, long, strings.Repeat("y", keyInFlightBytesMax)}))
	if want := `{"a":0,"b\"c":0,"` + strings.Repeat("y", keyInFlightBytesMax) + `":0}`; got != want {
		t.Errorf("keysInFlight = %s, want %s", got, want)
	}
}
