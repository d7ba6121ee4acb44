package console_test

import (
	"context"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/testlog"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/admin"
	"github.com/outbox-relay/outbox-relay/relay/console"
)

// seeded is an outbox with rows everywhere a console looks: pending,
// in backoff, archived and dead, keyed and not, hostile values included.
func seeded(t *testing.T) *dbtest.Schema {
	t.Helper()
	db := dbtest.New(t)
	db.Exec(t, `INSERT INTO %s.messages (topic, payload, key, headers)
SELECT 'orders.created', convert_to('{"n":' || i || '}', 'UTF8'), 'order-' || (i % 3), '{"content-type":"application/json"}'
  FROM generate_series(1, 12) AS i`)
	db.ExecAsRelay(t, `UPDATE %s.messages SET attempts = 2, last_error = 'webhook: HTTP 503', available_at = now() + interval '1 minute' WHERE id IN (SELECT id FROM %s.messages ORDER BY id LIMIT 2)`)
	db.Exec(t, `INSERT INTO %s.archive (id, topic, payload, key, idempotency_key, created_at, attempts, delivered_at, duplicate)
SELECT -i, 'orders.created', '\x7b7d', 'order-' || (i % 3), 'a-' || i, now() - interval '1 hour', 1, now() - i * interval '1 minute', i % 10 = 0
  FROM generate_series(1, 50) AS i`)
	db.Exec(t, `INSERT INTO %s.dead_letters (id, topic, payload, key, headers, idempotency_key, created_at, attempts, reason, error)
SELECT -1000 - i, CASE WHEN i % 2 = 0 THEN '<script>alert(1)</script>' ELSE 'payments.refund' END,
       CASE WHEN i % 3 = 0 THEN '\x00ff'::bytea ELSE convert_to('<img src=x onerror=alert(2)>', 'UTF8') END,
       'order-1', jsonb_build_object('x-note', 'a' || chr(8238) || 'b'), 'd-' || i, now(), 3,
       CASE WHEN i % 2 = 0 THEN 'permanent' ELSE 'exhausted' END, 'webhook: HTTP 422 "onerror=alert(3)'
  FROM generate_series(1, 6) AS i`)
	db.Exec(t, `UPDATE %s.dead_letters SET first_error = 'webhook: HTTP 503 at first' WHERE id = -1001`)
	db.Exec(t, `INSERT INTO %s.relays (id, version, mode, started_at, last_seen, claim_floor_lag) VALUES
('relay-alive', 'v1', 'unordered', now() - interval '1 hour', now(), 0.25),
('relay-gone', 'v1', 'unordered', now() - interval '2 hours', now() - interval '10 minutes', NULL)`)
	return db
}

// serve returns a console of db's outbox, served by an httptest server.
func serve(t *testing.T, db *dbtest.Schema, secret string) *httptest.Server {
	t.Helper()
	a, err := admin.New(db.Pool, db.Name)
	if err != nil {
		t.Fatal(err)
	}
	log, _ := testlog.New(t, slog.LevelInfo)
	h, err := console.New(console.Config{Secret: secret, Log: log, Served: "a test",
		Outboxes: func(context.Context) []console.Outbox {
			return []console.Outbox{{Database: "test", Schema: db.Name, Admin: a}}
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, client *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := client.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestEveryPageRendersAHostileOutboxAsText(t *testing.T) {
	t.Parallel()
	db := seeded(t)
	srv := serve(t, db, "")
	base := srv.URL + "/console/o/-/" + db.Name + "/"
	group := url.Values{"reason": {outbox.ReasonPermanent}, "error": {`webhook: HTTP 422 "onerror=alert(3)`}}
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/console/", []string{db.Name, "dead letters", "1 of 2", "rows in backoff", "1 relay not seen for 30s"}},
		{"/console/horizon", []string{"Who holds the horizon", db.Name}},
		{base, []string{"relay-gone", "not seen for 10m", "250ms", "webhook: HTTP 503"}},
		{base + "dead", []string{"6 in 2 groups", "&#34;onerror=alert(3)"}},
		{base + "dead/letters?" + group.Encode(), []string{"3 matched", "&lt;script&gt;alert(1)&lt;/script&gt;"}},
		{base + "dead/-1001", []string{"&lt;img src=x onerror=alert(2)&gt;", "a⟨U&#43;202E⟩b", "payments.refund", "First error", "webhook: HTTP 503 at first"}},
		{base + "dead/-1003", []string{"00 ff", "Not printable text"}},
		{base + "key?key=order-1", []string{"delivered", "pending", "dead letter"}},
	} {
		status, body := get(t, srv.Client(), srv.URL+strings.TrimPrefix(tc.path, srv.URL))
		if status != http.StatusOK {
			t.Errorf("GET %s: %d\n%s", tc.path, status, body)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s: no %q in the page", tc.path, w)
			}
		}
		for _, bad := range []string{"<script", "<img", "onerror=alert(2)>", "\u202e", "method=\"post\""} {
			if strings.Contains(body, bad) {
				t.Errorf("GET %s: the page holds %q", tc.path, bad)
			}
		}
	}
}

func TestAKeysHistoryIsInOrder(t *testing.T) {
	t.Parallel()
	db := seeded(t)
	srv := serve(t, db, "")
	_, body := get(t, srv.Client(), srv.URL+"/console/o/-/"+db.Name+"/key?key=order-2")
	var wheres []string
	for _, row := range strings.Split(body, `<tr class="key-row" data-where="`)[1:] {
		where, _, _ := strings.Cut(row, `"`)
		wheres = append(wheres, where)
	}
	// Archived rows (negative ids here) come first, then the pending ones.
	if len(wheres) == 0 || wheres[0] != admin.KeyDelivered && wheres[0] != admin.KeyDeduplicated || wheres[len(wheres)-1] != admin.KeyPending {
		t.Errorf("order-2's rows: %v", wheres)
	}
}

func TestUnknownOutboxesAndLettersAre404(t *testing.T) {
	t.Parallel()
	db := seeded(t)
	srv := serve(t, db, "")
	for _, p := range []string{"/console/o/-/nope/", "/console/o/-/" + db.Name + "/dead/424242", "/console/o/-/" + db.Name + "/dead/x", "/console/nope"} {
		if status, _ := get(t, srv.Client(), srv.URL+p); status != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, status)
		}
	}
}

// signedIn returns a client signed in to srv, and the form token of its
// session, read from a page as a browser would.
func signedIn(t *testing.T, srv *httptest.Server, secret string) (*http.Client, string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar}
	resp, err := client.PostForm(srv.URL+"/console/signin", url.Values{"secret": {secret}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, body := get(t, client, srv.URL+"/console/")
	_, rest, ok := strings.Cut(body, `name="csrf" value="`)
	if !ok {
		t.Fatalf("no form token on the overview once signed in:\n%s", body)
	}
	token, _, _ := strings.Cut(rest, `"`)
	return client, token
}

// dryRunAsOf returns the dry run's time that the confirm form of a dry
// run's page carries.
func dryRunAsOf(t *testing.T, page string) string {
	t.Helper()
	m := regexp.MustCompile(`<input type="hidden" name="as_of" value="([^"]+)">`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("the dry run's page has no as_of field:\n%s", page)
	}
	return html.UnescapeString(m[1])
}

func post(t *testing.T, client *http.Client, u string, form url.Values) (int, string) {
	t.Helper()
	resp, err := client.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestActionsCountFirstThenChangeOnConfirmation(t *testing.T) {
	t.Parallel()
	const secret = "a secret long enough to sign in"
	db := seeded(t)
	srv := serve(t, db, secret)
	client, token := signedIn(t, srv, secret)
	base := srv.URL + "/console/o/-/" + db.Name + "/"

	// Purge one letter: the dry run changes nothing.
	status, body := post(t, client, base+"dead/purge", url.Values{"csrf": {token}, "id": {"-1001"}})
	if status != http.StatusOK || !strings.Contains(body, `<strong id="count">1</strong>`) {
		t.Fatalf("purge dry run: %d\n%s", status, body)
	}
	if n := db.CountWhere(t, "dead_letters", "id = -1001"); n != 1 {
		t.Fatalf("the dry run purged the letter")
	}
	status, body = post(t, client, base+"dead/purge", url.Values{"csrf": {token}, "id": {"-1001"}, "confirm": {"yes"}, "as_of": {dryRunAsOf(t, body)}})
	if status != http.StatusOK || !strings.Contains(body, "Purged 1 dead letters") || db.CountWhere(t, "dead_letters", "id = -1001") != 0 {
		t.Fatalf("purge: %d\n%s", status, body)
	}

	// Retry a group: exhausted, with the one error (2 letters left of 3).
	group := url.Values{"csrf": {token}, "reason": {outbox.ReasonExhausted}, "error": {`webhook: HTTP 422 "onerror=alert(3)`}}
	if _, body = post(t, client, base+"dead/retry", group); !strings.Contains(body, `<strong id="count">2</strong>`) {
		t.Fatalf("retry dry run:\n%s", body)
	}
	// A letter of the group that fails after the dry run is not taken
	// by its confirmation: the operator confirmed two.
	db.Exec(t, `INSERT INTO %s.dead_letters (id, topic, payload, idempotency_key, attempts, reason, error, failed_at, created_at)
	  VALUES (-1099, 'late', '{}', 'd-late', 9, 'exhausted', $1, now() + interval '1 second', now())`, group.Get("error"))
	group.Set("confirm", "yes")
	if status, _ = post(t, client, base+"dead/retry", group); status != http.StatusBadRequest {
		t.Errorf("a confirmation without its dry run's time: %d, want 400", status)
	}
	group.Set("as_of", dryRunAsOf(t, body))
	if _, body = post(t, client, base+"dead/retry", group); !strings.Contains(body, "Retried 2 dead letters") {
		t.Fatalf("retry:\n%s", body)
	}
	if n := db.CountWhere(t, "dead_letters", "reason = 'exhausted'"); n != 1 || db.CountWhere(t, "dead_letters", "id = -1099") != 1 {
		t.Errorf("%d exhausted letters left after retrying their group, want the one that failed after the dry run", n)
	}
	if n := db.CountWhere(t, "messages_all", "idempotency_key IN ('d-3', 'd-5')"); n != 2 {
		t.Errorf("%d of the retried letters are back in the hot table, want 2 (d-1 was purged)", n)
	}

	// Cancel a key's pending rows.
	pending := db.CountWhere(t, "messages_all", "key = 'order-0'")
	if _, body = post(t, client, base+"cancel", url.Values{"csrf": {token}, "key": {"order-0"}}); !strings.Contains(body, `<strong id="count">`+strconv.Itoa(pending)+`</strong>`) {
		t.Fatalf("cancel dry run (want %d):\n%s", pending, body)
	}
	if _, body = post(t, client, base+"cancel", url.Values{"csrf": {token}, "key": {"order-0"}, "confirm": {"yes"}}); !strings.Contains(body, "Cancelled "+strconv.Itoa(pending)+" rows") {
		t.Fatalf("cancel:\n%s", body)
	}
	if n := db.CountWhere(t, "dead_letters", "key = 'order-0' AND reason = 'cancelled'"); n != pending {
		t.Errorf("%d cancelled letters of order-0, want %d", n, pending)
	}

	// An empty selection is refused: the console never acts on every
	// dead letter.
	if status, _ = post(t, client, base+"dead/purge", url.Values{"csrf": {token}, "confirm": {"yes"}}); status != http.StatusBadRequest {
		t.Errorf("purge without a selection: %d, want 400", status)
	}
}
