package cli

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
)

// TestProcess_HistoryPartitionsAreDroppedPastRetentionWhileRowsFlow runs
// two relays of the binary with RELAY_ARCHIVE_RETENTION and
// RELAY_DEDUP_RETENTION of 6 s, so that their history partitions (1.5 s
// and 3 s wide) are added and dropped every few seconds while rows with
// producers' idempotency keys flow: every row reaches the stream once, a
// key inserted again within its retention is archived as a duplicate and
// not sent, the archive and the delivered keys empty once everything is
// past retention, both relays export history_partitions and count the
// rows their drops removed, and no settle fails for want of a partition.
func TestProcess_HistoryPartitionsAreDroppedPastRetentionWhileRowsFlow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "EVENTS", "events.>")
	env := relayEnv(db, srv, "RELAY_ARCHIVE_RETENTION=6s", "RELAY_DEDUP_RETENTION=6s")
	relays := []*process{startProcess(t, env...), startProcess(t, env...)}

	const batches, perBatch = 20, 50
	for b := range batches {
		db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key)
		            SELECT 'events.orders', convert_to('order ' || i, 'UTF8'), 'evt-' || i
		              FROM generate_series($1::int, $2::int) AS i`, b*perBatch+1, (b+1)*perBatch)
		time.Sleep(250 * time.Millisecond)
	}
	// A key delivered a moment ago, inserted again: a duplicate.
	waitfor.Condition(t, 30*time.Second, "evt-1000 archived", func() bool {
		return db.CountWhere(t, "archive", "idempotency_key = 'evt-1000'") == 1
	})
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ('events.orders', 'again', 'evt-1000')`)
	waitfor.Condition(t, 30*time.Second, "evt-1000 archived again, as a duplicate", func() bool {
		return db.CountWhere(t, "archive", "idempotency_key = 'evt-1000' AND duplicate") == 1
	})
	const n = batches * perBatch
	if got := srv.Count(t, "EVENTS"); got != n {
		t.Errorf("the stream holds %d messages, want %d: each row once, the duplicate not sent", got, n)
	}

	waitfor.Condition(t, 60*time.Second, "the archive and the delivered keys emptied by retention", func() bool {
		return db.Count(t, "archive") == 0 && db.Count(t, "delivered_keys") == 0 && db.Count(t, "messages_all") == 0
	})
	var parts int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+db.Table("history_partitions")+"('archive')").Scan(&parts); err != nil {
		t.Fatal(err)
	}
	if parts > 8 {
		t.Errorf("the archive has %d partitions for 6 s of history in 1.5 s partitions", parts)
	}

	deleted := regexp.MustCompile(`(?m)^outbox_relay_retention_deleted_total\{[^}]*table="archive"[^}]*\} (\S+)$`)
	gauge := regexp.MustCompile(`(?m)^outbox_relay_history_partitions\{[^}]*table="archive"[^}]*\} (\S+)$`)
	var dropped float64
	for i, p := range relays {
		m := p.metrics()
		if !gauge.MatchString(m) {
			t.Errorf("relay %d does not export history_partitions for the archive", i+1)
		}
		if d := deleted.FindStringSubmatch(m); d != nil {
			v, _ := strconv.ParseFloat(d[1], 64)
			dropped += v
		}
		for _, line := range p.log() {
			if strings.Contains(line, "no partition") || strings.Contains(line, `"level":"ERROR"`) {
				t.Errorf("relay %d logged: %s", i+1, line)
			}
		}
	}
	if want := float64(n + 1); dropped != want {
		t.Errorf("the relays counted %v archived rows removed by retention, want %v (every row and the duplicate)", dropped, want)
	}
	logged := false
	for _, p := range relays {
		for _, line := range p.log() {
			logged = logged || strings.Contains(line, "dropped history partitions past retention")
		}
	}
	if !logged {
		t.Error("no relay logged a partition it dropped")
	}
}
