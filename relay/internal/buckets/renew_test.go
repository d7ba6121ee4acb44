package buckets

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// A round writes a bucket's row only when its lease ends within
// Times.RenewWithin: each write is a version that a pinned horizon keeps
// and every claim and settle reads. Rounds that follow one another leave
// the rows alone, and a lease that nears that point is extended to
// Times.Lease, the bucket still held under its epoch.
func TestRound_RenewsABucketOnlyWhenItsLeaseEndsWithinRenewWithin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	db.SetMode(t, outbox.ModePartitioned)
	o := testOwner(db, "relay-a")
	type version struct {
		xmin  string
		epoch int64
		left  time.Duration
	}
	read := func() map[int32]version {
		t.Helper()
		rows, err := db.Pool.Query(ctx, "SELECT bucket, xmin::text, epoch, extract(epoch FROM lease_until - now()) FROM "+db.Table("buckets")+" WHERE owner = 'relay-a'")
		if err != nil {
			t.Fatal(err)
		}
		got := map[int32]version{}
		for rows.Next() {
			var b int32
			var v version
			var left float64
			if err := rows.Scan(&b, &v.xmin, &v.epoch, &left); err != nil {
				t.Fatal(err)
			}
			v.left = time.Duration(left * float64(time.Second))
			got[b] = v
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		return got
	}
	round := func() {
		t.Helper()
		if _, err := o.round(ctx); err != nil {
			t.Fatal(err)
		}
	}

	round()
	acquired := read()
	if len(acquired) != 64 {
		t.Fatalf("the only relay holds %d buckets after a round, want 64", len(acquired))
	}
	for range 3 {
		round()
	}
	for b, v := range read() {
		if v.xmin != acquired[b].xmin {
			t.Errorf("bucket %d was written again by rounds while its lease had %s left (RenewWithin %s)", b, acquired[b].left, o.times.RenewWithin)
		}
	}

	// Bucket 7's lease now ends within RenewWithin.
	db.Exec(t, "UPDATE %s.buckets SET lease_until = now() + interval '20 seconds' WHERE bucket = 7")
	before := read()
	round()
	after := read()
	if len(after) != 64 {
		t.Fatalf("the relay holds %d buckets after a renewal, want 64", len(after))
	}
	if v := after[7]; v.xmin == before[7].xmin || v.epoch != before[7].epoch || v.left < o.times.Lease-5*time.Second {
		t.Errorf("bucket 7, 20 s from the end of its lease, after a round: %+v (before %+v), want renewed to %s under the same epoch", v, before[7], o.times.Lease)
	}
	for b, v := range after {
		if b != 7 && v.xmin != before[b].xmin {
			t.Errorf("bucket %d was written again while its lease had %s left", b, before[b].left)
		}
	}
}

// testOwner returns an owner of db's buckets as relay id, with a 30 s row
// lease, whose heartbeat records id in the relays table.
func testOwner(db *dbtest.Schema, id string) *Owner {
	return NewOwner(Config{
		DB: db.Pool, Schema: db.Name, QuotedSchema: outbox.QuoteSchema(db.Name), RelayID: id, RowLease: 30 * time.Second,
		Heartbeat: func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+db.Table("relays")+" (id, version, mode, notify) VALUES ($1, 'test', 'partitioned', false)"+
				" ON CONFLICT (id) DO UPDATE SET last_seen = now()", id)
			return err
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
}
