package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/relay/admin"
)

// A dead letter written by hostile hands comes back exactly: markup in its
// topic, key, error and headers, header values that are not strings (read
// as their JSON text), and a payload that is not UTF-8.
func TestDeadLetter_HostileValuesRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	const script = `<script>alert("x")</script>`
	payload := []byte("\x00\xff\xfe<script>\x80\xc3\x28'\"\\")
	id := insertDead(t, db, script, script+"&amp;", "k1", "permanent", script)
	db.Exec(t, `UPDATE %s.dead_letters SET payload = $2, available_at = '2026-01-02T16:00:00Z',
	            headers = '{"x-html": "<script>alert(1)</script>", "x-quote": "\"\u00e9\"", "n": 1, "o": {"a": [1, 2]}, "b": true, "z": null}'
	            WHERE id = $1`, id, payload)

	d, err := ops(t, db).DeadLetter(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := admin.DeadLetter{ID: id, Topic: script, Key: script + "&amp;", IdempotencyKey: "k1", Destination: "nats", Attempts: 3,
		Reason: "permanent", Error: script, FailedAt: d.FailedAt, CreatedAt: time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC), PayloadBytes: len(payload)}
	d.CreatedAt = d.CreatedAt.UTC()
	if d.DeadLetter != want {
		t.Errorf("dead letter %+v\nwant %+v", d.DeadLetter, want)
	}
	if !bytes.Equal(d.Payload, payload) || d.PayloadTruncated {
		t.Errorf("payload %q (truncated %v), want %q whole", d.Payload, d.PayloadTruncated, payload)
	}
	wantHeaders := map[string]string{"x-html": "<script>alert(1)</script>", "x-quote": `"é"`, "n": "1", "o": `{"a": [1, 2]}`, "b": "true", "z": "null"}
	if !maps.Equal(d.Headers, wantHeaders) {
		t.Errorf("headers %q\nwant %q", d.Headers, wantHeaders)
	}
	if d.AvailableAt == nil || !d.AvailableAt.Equal(time.Date(2026, 1, 2, 16, 0, 0, 0, time.UTC)) {
		t.Errorf("available_at %v, want 2026-01-02T16:00:00Z", d.AvailableAt)
	}

	// JSON carries the payload's bytes (base64) and the markup as text.
	out, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var back admin.DeadLetterDetail
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.Payload, payload) || back.Topic != script || !maps.Equal(back.Headers, wantHeaders) || !strings.Contains(string(out), `"payload_truncated":false`) {
		t.Errorf("through JSON: %s", out)
	}
}

func TestDeadLetter_Headers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	id := insertDead(t, db, "orders.created", "", "k1", "permanent", "boom")
	for _, tc := range []struct {
		headers string // SQL
		want    map[string]string
	}{
		{`NULL`, nil},
		{`'null'::jsonb`, nil},
		{`'{}'::jsonb`, map[string]string{}},
		{`'{"trace-id": "t1"}'::jsonb`, map[string]string{"trace-id": "t1"}},
		{`'[1, "two"]'::jsonb`, map[string]string{"": `[1, "two"]`}},
		{`'"alone"'::jsonb`, map[string]string{"": "alone"}},
	} {
		db.Exec(t, `UPDATE %s.dead_letters SET headers = `+tc.headers+` WHERE id = $1`, id)
		d, err := ops(t, db).DeadLetter(ctx, id, 0)
		if err != nil {
			t.Fatalf("headers %s: %v", tc.headers, err)
		}
		if !maps.Equal(d.Headers, tc.want) || (d.Headers == nil) != (tc.want == nil) {
			t.Errorf("headers %s: read %#v, want %#v", tc.headers, d.Headers, tc.want)
		}
	}
}

// The payload is cut in PostgreSQL to the preview asked for (4 KiB by
// default), and says so.
func TestDeadLetter_PayloadPreview(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	id := insertDead(t, db, "orders.created", "", "k1", "permanent", "payload too large")
	const size = 8 << 20
	db.Exec(t, `UPDATE %s.dead_letters SET payload = convert_to(repeat('0123456789abcdef', $2 / 16), 'UTF8') WHERE id = $1`, id, size)
	for _, tc := range []struct{ preview, want int }{{0, admin.PreviewBytesDefault}, {-1, admin.PreviewBytesDefault}, {10, 10}, {size, size}, {size + 1, size}} {
		d, err := ops(t, db).DeadLetter(ctx, id, tc.preview)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Payload) != tc.want || d.PayloadBytes != size || d.PayloadTruncated != (tc.want < size) ||
			string(d.Payload[:10]) != "0123456789" {
			t.Errorf("preview %d: %d bytes of %d (truncated %v), starting %q; want %d", tc.preview, len(d.Payload), d.PayloadBytes, d.PayloadTruncated, d.Payload[:min(10, len(d.Payload))], tc.want)
		}
	}
	id2 := insertDead(t, db, "orders.created", "", "k2", "permanent", "empty")
	db.Exec(t, `UPDATE %s.dead_letters SET payload = '' WHERE id = $1`, id2)
	if d, err := ops(t, db).DeadLetter(ctx, id2, 0); err != nil || len(d.Payload) != 0 || d.PayloadBytes != 0 || d.PayloadTruncated {
		t.Errorf("an empty payload: %+v, %v", d, err)
	}
}

func TestDeadLetter_NotFound(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	id := insertDead(t, db, "orders.created", "", "k1", "permanent", "boom")
	if _, err := ops(t, db).PurgeDead(context.Background(), admin.PurgeDeadOptions{DeadFilter: admin.DeadFilter{IDs: []int64{id}}}); err != nil {
		t.Fatal(err)
	}
	d, err := ops(t, db).DeadLetter(context.Background(), id, 0)
	if !errors.Is(err, admin.ErrNotFound) || !strings.Contains(err.Error(), strconv.FormatInt(id, 10)) || d != nil {
		t.Errorf("a purged dead letter: %+v, %v; want ErrNotFound naming id %d", d, err, id)
	}
}
