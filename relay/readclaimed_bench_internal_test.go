package relay

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
)

// BenchmarkReadClaimed reads rows as a claim returns them (the columns of
// leaseRows, rows as the benchmarks write them: a topic, 256 bytes of
// payload, one header) into the relay's batch: the Go side of a claim, a
// fifth of the relay's CPU in a drain. A drain's claims read 1,000 rows;
// a steady stream's a few dozen of the 1,000 they may take, one claim
// after another (claimRunner.sizeHint). Its allocations per operation are
// the figure to watch (go test -bench ReadClaimed -benchmem ./relay); the
// time includes PostgreSQL's answer.
func BenchmarkReadClaimed(b *testing.B) {
	db := dbtest.New(b)
	db.Exec(b, `INSERT INTO %s.messages (topic, payload, headers)
	  SELECT 'bench.created', convert_to(repeat('x', 256), 'UTF8'), '{"trace": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
	    FROM generate_series(1, 1000)`)
	for _, rows := range []int{1000, 40} {
		b.Run(fmt.Sprintf("%d rows of 1000", rows), func(b *testing.B) {
			query := `SELECT m.id, m.topic, m.payload, m.key, m.headers, m.idempotency_key, m.destination,
			                 m.created_at, m.attempts, m.claim_seq, false AS rescued, false AS duplicate,
			                 0 AS bucket, NULL::text AS too_large, m.available_at AS due_at, NULL::text AS held_key
			            FROM ` + db.Table("messages") + ` AS m ORDER BY m.id LIMIT ` + strconv.Itoa(rows)
			cr := &claimRunner{cfg: Config{DefaultSink: "nats"}}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				r, err := db.Pool.Query(ctx, query)
				if err != nil {
					b.Fatal(err)
				}
				batch, _, err := cr.readClaimed(r, 1000)
				if err != nil || len(batch) != rows {
					b.Fatalf("read %d rows: %v", len(batch), err)
				}
			}
		})
	}
}
