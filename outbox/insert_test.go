package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

type stored struct {
	topic, key, idempotencyKey string
	destination                *string
	payload                    []byte
	headers                    map[string]string
	availableAt, createdAt     time.Time
}

func readAll(t *testing.T, db *dbtest.Schema) []stored {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(),
		"SELECT topic, coalesce(key, ''), idempotency_key, destination, payload, headers, available_at, created_at FROM "+db.Table("messages")+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (stored, error) {
		var s stored
		return s, r.Scan(&s.topic, &s.key, &s.idempotencyKey, &s.destination, &s.payload, &s.headers, &s.availableAt, &s.createdAt)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func inTx(t *testing.T, db *dbtest.Schema, f func(pgx.Tx) error) error {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	return tx.Commit(ctx)
}

func TestWriter_InsertsABatchInOneStatement(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	later := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	msgs := []outbox.Message{
		{Topic: "orders.created", Payload: []byte{0x00, 0xff, 'x'}},
		{Topic: "orders.paid", Payload: []byte(`{"id":1}`), Key: "order-1",
			Headers:        map[string]string{"content-type": "application/json", "traceparent": "00-abc-def-01"},
			IdempotencyKey: "order-1-paid", Destination: "webhook", AvailableAt: later},
		{Topic: "orders.empty"},
	}
	var n int64
	err := inTx(t, db, func(tx pgx.Tx) error {
		var err error
		n, err = outbox.Writer{Schema: db.Name}.Insert(context.Background(), tx, msgs...)
		return err
	})
	if err != nil || n != 3 {
		t.Fatalf("Insert = %d, %v; want 3, nil", n, err)
	}
	got := readAll(t, db)
	if len(got) != 3 {
		t.Fatalf("%d rows stored, want 3", len(got))
	}
	if string(got[0].payload) != "\x00\xffx" || got[0].headers != nil || got[0].destination != nil || got[0].idempotencyKey == "" {
		t.Errorf("first row = %+v", got[0])
	}
	// Due at once: at the insert's time, which the guard reads after the
	// transaction's start (created_at) and within the statement.
	if a, c := got[0].availableAt, got[0].createdAt; a.Before(c) || a.Sub(c) > 5*time.Second {
		t.Errorf("available_at defaulted to %v, want the insert's time, at or just after created_at %v", a, c)
	}
	second := got[1]
	if second.key != "order-1" || second.idempotencyKey != "order-1-paid" || *second.destination != "webhook" ||
		second.headers["traceparent"] != "00-abc-def-01" || !second.availableAt.Equal(later) {
		t.Errorf("second row = %+v", second)
	}
	if got[2].payload == nil || len(got[2].payload) != 0 {
		t.Errorf("nil payload stored as %v, want empty", got[2].payload)
	}
	if got[0].idempotencyKey == got[2].idempotencyKey {
		t.Error("generated idempotency keys are equal")
	}
}

func TestWriter_PendingDuplicateKeyFailsOrIsSkipped(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	m := outbox.Message{Topic: "a", Payload: []byte("x"), IdempotencyKey: "same"}
	if err := inTx(t, db, func(tx pgx.Tx) error { _, err := outbox.Writer{Schema: db.Name}.Insert(ctx, tx, m); return err }); err != nil {
		t.Fatal(err)
	}
	err := inTx(t, db, func(tx pgx.Tx) error { _, err := outbox.Writer{Schema: db.Name}.Insert(ctx, tx, m); return err })
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		t.Fatalf("second insert of a pending key: %v, want a unique violation", err)
	}
	var n int64
	err = inTx(t, db, func(tx pgx.Tx) error {
		var err error
		n, err = outbox.Writer{Schema: db.Name, SkipDuplicates: true}.Insert(ctx, tx, m, outbox.Message{Topic: "b", Payload: []byte("y")})
		return err
	})
	if err != nil || n != 1 {
		t.Fatalf("SkipDuplicates insert = %d, %v; want 1 (the new message), nil", n, err)
	}
	if got := db.Count(t, "messages_all"); got != 2 {
		t.Errorf("%d rows, want 2", got)
	}
}

func TestWriter_RefusesAMessageWithoutTopic(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	err := inTx(t, db, func(tx pgx.Tx) error {
		_, err := outbox.Writer{Schema: db.Name}.Insert(context.Background(), tx, outbox.Message{Payload: []byte("x")})
		return err
	})
	if !errors.Is(err, outbox.ErrNoTopic) {
		t.Errorf("err = %v, want ErrNoTopic", err)
	}
}

func TestMessagesTable_PlainSQLContract(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ok := []string{
		// Only topic and payload: a JSON text literal works.
		`INSERT INTO %s.messages (topic, payload) VALUES ('orders.created', '{"id": 42}')`,
		`INSERT INTO %s.messages (topic, payload, headers) VALUES ('t', 'x', '{"content-type": "application/json", "x-custom_1.2": ""}')`,
		`INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ('t', 'x', 'k1') ON CONFLICT (idempotency_key) DO NOTHING`,
		`INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ('t', 'x', 'k1') ON CONFLICT (idempotency_key) DO NOTHING`,
		`INSERT INTO %s.messages (topic, payload) VALUES ('t', convert_to('{"a": "back\\slash"}', 'UTF8'))`,
	}
	for _, sql := range ok {
		db.Exec(t, sql)
	}
	var payload []byte
	if err := db.Pool.QueryRow(context.Background(), "SELECT payload FROM "+db.Table("messages")+" ORDER BY id LIMIT 1").Scan(&payload); err != nil {
		t.Fatal(err)
	}
	if string(payload) != `{"id": 42}` {
		t.Errorf("payload of a JSON literal = %q", payload)
	}
	if got := db.Count(t, "messages_all"); got != 4 {
		t.Errorf("%d rows, want 4 (the duplicate key skipped)", got)
	}

	refused := map[string]string{
		"headers array":          `INSERT INTO %s.messages (topic, payload, headers) VALUES ('t', 'x', '["a"]')`,
		"header number value":    `INSERT INTO %s.messages (topic, payload, headers) VALUES ('t', 'x', '{"a": 1}')`,
		"header nested object":   `INSERT INTO %s.messages (topic, payload, headers) VALUES ('t', 'x', '{"a": {"b": "c"}}')`,
		"header name with space": `INSERT INTO %s.messages (topic, payload, headers) VALUES ('t', 'x', '{"a b": "c"}')`,
		"header name with colon": `INSERT INTO %s.messages (topic, payload, headers) VALUES ('t', 'x', '{"a:b": "c"}')`,
		"header value newline":   `INSERT INTO %s.messages (topic, payload, headers) VALUES ('t', 'x', '{"a": "b\nX-Injected: 1"}')`,
		"header array value":     `INSERT INTO %s.messages (topic, payload, headers) VALUES ('t', 'x', '{"a": ["b"]}')`,
		"empty topic":            `INSERT INTO %s.messages (topic, payload) VALUES ('', 'x')`,
		"no payload":             `INSERT INTO %s.messages (topic) VALUES ('t')`,
		"empty idempotency key":  `INSERT INTO %s.messages (topic, payload, idempotency_key) VALUES ('t', 'x', '')`,
	}
	for name, sql := range refused {
		_, err := db.Pool.Exec(context.Background(), strings.ReplaceAll(sql, "%s", `"`+db.Name+`"`))
		if err == nil {
			t.Errorf("%s: insert accepted", name)
		} else if strings.HasPrefix(name, "header") && !strings.Contains(err.Error(), "headers_must_be_a_json_object_of_strings") {
			t.Errorf("%s: error %q does not name the headers rule", name, err)
		}
	}
}
