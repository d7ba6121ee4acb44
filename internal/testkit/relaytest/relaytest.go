// Package relaytest holds what the relay's end-to-end tests share: a relay
// run for the length of a test (Start), rows written with plain SQL, and
// the check that a stream holds exactly what the archive says was
// delivered, byte for byte.
package relaytest

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
)

// InsertRows inserts n rows into db's outbox with plain SQL: payloads that
// differ per row and include non-UTF-8 bytes, two headers, every fourth row
// keyed.
func InsertRows(t testing.TB, db *dbtest.Schema, n int, topic string) {
	t.Helper()
	db.Exec(t, `
INSERT INTO %s.messages (topic, payload, key, headers)
SELECT $1,
       '\x00ff'::bytea || convert_to(json_build_object('seq', i, 'pad', repeat(chr(97 + i % 26), 200))::text, 'UTF8'),
       CASE WHEN i % 4 = 0 THEN 'order-' || (i % 100) END,
       jsonb_build_object('content-type', 'application/json', 'traceparent', '00-' || lpad(to_hex(i), 32, '0') || '-00f067aa0ba902b7-01')
  FROM generate_series(1, $2) AS i`, topic, n)
}

// Archived is a row of the archive.
type Archived struct {
	Payload   []byte
	Headers   map[string]string
	Duplicate bool
}

// Archive returns the archived rows matching where (an SQL condition, "true"
// for all) by idempotency key, failing t when a key was archived twice as
// delivered.
func Archive(t testing.TB, db *dbtest.Schema, where string) map[string]Archived {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), "SELECT idempotency_key, payload, headers, duplicate FROM "+db.Table("archive")+" WHERE "+where)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]Archived{}
	for rows.Next() {
		var key string
		var a Archived
		if err := rows.Scan(&key, &a.Payload, &a.Headers, &a.Duplicate); err != nil {
			t.Fatal(err)
		}
		if prev, dup := out[key]; dup && !prev.Duplicate && !a.Duplicate {
			t.Errorf("idempotency key %s archived twice as delivered", key)
		}
		if !a.Duplicate {
			out[key] = a
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// AssertStreamMatchesArchive checks that stream holds exactly want messages,
// one per delivered row of the archive, each with the row's payload byte for
// byte, its headers and Nats-Msg-Id = its idempotency key.
func AssertStreamMatchesArchive(t testing.TB, db *dbtest.Schema, srv *natstest.Server, stream string, want int) {
	t.Helper()
	AssertStreamMatchesArchiveWhere(t, db, srv, stream, "true", want)
}

// AssertStreamMatchesArchiveWhere is AssertStreamMatchesArchive for the
// archived rows matching where, such as those of one destination.
func AssertStreamMatchesArchiveWhere(t testing.TB, db *dbtest.Schema, srv *natstest.Server, stream, where string, want int) {
	t.Helper()
	arch := Archive(t, db, where)
	if len(arch) != want {
		t.Fatalf("archive holds %d delivered rows, want %d", len(arch), want)
	}
	msgs := srv.Messages(t, stream)
	if len(msgs) != want {
		t.Fatalf("stream %s holds %d messages, want %d", stream, len(msgs), want)
	}
	seen := map[string]bool{}
	for _, m := range msgs {
		id := m.Header.Get(nats.MsgIdHdr)
		if seen[id] {
			t.Fatalf("message %s is twice in the stream", id)
		}
		seen[id] = true
		row, ok := arch[id]
		if !ok {
			t.Fatalf("stream message %s is not in the archive", id)
		}
		if !bytes.Equal(m.Data, row.Payload) {
			t.Fatalf("message %s payload = %q, want %q", id, m.Data, row.Payload)
		}
		for k, v := range row.Headers {
			if got := m.Header.Get(k); got != v {
				t.Fatalf("message %s header %s = %q, want %q", id, k, got, v)
			}
		}
	}
}

// WaitFor waits until the boolean query (with %s for the quoted schema)
// returns true.
func WaitFor(t testing.TB, db *dbtest.Schema, query string) {
	t.Helper()
	q := strings.ReplaceAll(query, "%s", pgx.Identifier{db.Name}.Sanitize())
	waitfor.Condition(t, 30*time.Second, query, func() bool {
		var ok bool
		_ = db.Pool.QueryRow(context.Background(), q).Scan(&ok)
		return ok
	})
}

// Budget is how long a test may wait for n rows to go through the relay: a
// generous base plus 5ms a row, so that a loaded machine (CI beside other
// work, the race detector) slows a test down without failing it.
func Budget(n int) time.Duration {
	return 30*time.Second + time.Duration(n)*5*time.Millisecond
}

// WaitDrained waits for db's hot table to empty.
func WaitDrained(t testing.TB, db *dbtest.Schema, timeout time.Duration) {
	t.Helper()
	waitfor.Condition(t, timeout, "the hot table to empty", func() bool { return db.Count(t, "messages_all") == 0 })
}
