package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/browsertest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/internal/testkit/webhooktest"
)

// These tests open the web console (docs/console.md) in a real headless
// Chromium, served by the real binary (a relay with RELAY_CONSOLE, or
// `outbox-relay console`) on a real schema whose rows a real webhook
// receiver accepts or refuses.

// consoleScreenshots makes TestConsoleBrowser_OperatorFixesAnIncident save
// its screenshots where docs/console.md shows them, instead of in a
// temporary directory:
//
//	go test ./internal/cli/ -run TestConsoleBrowser_OperatorFixesAnIncident -console-screenshots
var consoleScreenshots = flag.Bool("console-screenshots", false, "save the console's screenshots into docs/console/ (for docs/console.md)")

// screenshotPath is where the screenshot name goes: docs/console/ with
// -console-screenshots, dir otherwise.
func screenshotPath(dir, name string) string {
	if *consoleScreenshots {
		return filepath.Join(repoRoot, "docs", "console", name)
	}
	return filepath.Join(dir, name)
}

// consoleRelayEnv is the environment of a relay delivering to rcv with
// its console on, settings short enough that failing rows reach the dead
// letters within a second.
func consoleRelayEnv(db *dbtest.Schema, rcv *webhooktest.Receiver, extra ...string) []string {
	return append([]string{
		"DATABASE_URL=" + db.URL, "RELAY_SCHEMA=" + db.Name,
		"WEBHOOK_URL=" + rcv.URL, "WEBHOOK_SECRET=" + rcv.Secret,
		"RELAY_CONSOLE=true",
		"RELAY_POLL_INTERVAL=20ms", "RELAY_MAX_ATTEMPTS=2", "RELAY_BACKOFF_MIN=50ms", "RELAY_BACKOFF_MAX=100ms",
	}, extra...)
}

// consoleSecretFile writes a fresh 32-byte secret (hex, so that it can be
// typed) to a file for RELAY_CONSOLE_SECRET_FILE and returns both.
func consoleSecretFile(t *testing.T) (secret, path string) {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	secret = hex.EncodeToString(b)
	path = filepath.Join(t.TempDir(), "console-secret")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return secret, path
}

// relayConsole waits for the relay to serve its endpoint and the console
// on it, and returns the console's URL (ending in /console/).
func relayConsole(t *testing.T, p *process) string {
	t.Helper()
	p.waitLog(`"serving the console"`)
	waitfor.Condition(t, 30*time.Second, "the relay's HTTP endpoint", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.addr != ""
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	return "http://" + p.addr + "/console/"
}

// logEntries returns the JSON log lines whose msg is msg, decoded.
func logEntries(p *process, msg string) []map[string]any {
	var out []map[string]any
	for _, line := range p.log() {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) == nil && e["msg"] == msg {
			out = append(out, e)
		}
	}
	return out
}

// standaloneConsole waits for `outbox-relay console` to log where it
// serves and returns that URL (ending in /console/).
func standaloneConsole(t *testing.T, p *process) string {
	t.Helper()
	var u string
	waitfor.Condition(t, 30*time.Second, `the "serving the console" log line`, func() bool {
		if !p.running() {
			t.Fatalf("outbox-relay console exited:\n%s", strings.Join(p.log(), "\n"))
		}
		for _, e := range logEntries(p, "serving the console") {
			u, _ = e["url"].(string)
		}
		return u != ""
	})
	return u
}

// seedRow is a row a producer inserts.
type seedRow struct {
	topic   string
	key     string // "" for none
	headers string // JSON; "" for none
	payload []byte
}

// insertSeedRows inserts rows one after another, with plain SQL as a
// producer does, and returns their ids (ascending).
func insertSeedRows(t *testing.T, db *dbtest.Schema, rows []seedRow) []int64 {
	t.Helper()
	ids := make([]int64, len(rows))
	for i, r := range rows {
		var key, headers any
		if r.key != "" {
			key = r.key
		}
		if r.headers != "" {
			headers = r.headers
		}
		err := db.Pool.QueryRow(context.Background(),
			"INSERT INTO "+db.Table("messages")+" (topic, payload, key, headers) VALUES ($1, $2, $3, $4::jsonb) RETURNING id",
			r.topic, r.payload, key, headers).Scan(&ids[i])
		if err != nil {
			t.Fatalf("insert row %d (%s): %v", i, r.topic, err)
		}
	}
	return ids
}

// waitSettled waits until the hot table is empty and dead holds the dead
// letters.
func waitSettled(t *testing.T, db *dbtest.Schema, dead int) {
	t.Helper()
	waitfor.Condition(t, 30*time.Second, fmt.Sprintf("every row delivered or dead-lettered (%d dead letters)", dead), func() bool {
		return db.Count(t, "messages_all") == 0 && db.Count(t, "dead_letters") == dead
	})
}

// refuse422 makes rcv answer 422 (which the webhook sink dead-letters at
// once: sinks/webhook, docs/sinks.md) with body to the requests refuse
// selects, and 204 to the others.
func refuse422(rcv *webhooktest.Receiver, body string, refuse func(r *http.Request) bool) {
	rcv.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		if !refuse(r) {
			return 0
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = io.WriteString(w, body)
		return http.StatusUnprocessableEntity
	})
}

// rowSelector is the CSS selector of the i-th row (from 1) of the table
// with id table.
func rowSelector(table string, i int) string {
	return fmt.Sprintf("#%s > tbody > tr:nth-child(%d)", table, i)
}

// deadGroup is one line of the dead-letter groups page.
type deadGroup struct {
	row   string // its CSS selector
	cause string
	count string
}

// readDeadGroups reads the groups on the dead letters page open in b.
func readDeadGroups(t *testing.T, b *browsertest.Browser) []deadGroup {
	t.Helper()
	var out []deadGroup
	for i := 1; b.Exists(t, rowSelector("dead-groups", i)+".dead-group"); i++ {
		row := rowSelector("dead-groups", i)
		out = append(out, deadGroup{row: row, cause: b.Text(t, row+" .cause"), count: strings.TrimSpace(b.Text(t, row+" .count"))})
	}
	return out
}

// keyRow is one line of the key page.
type keyRow struct {
	id    int64
	where string // its data-where
	topic string
}

// readKeyRows reads the rows on the key page open in b, in page order.
func readKeyRows(t *testing.T, b *browsertest.Browser) []keyRow {
	t.Helper()
	var out []keyRow
	for i := 1; b.Exists(t, rowSelector("key-rows", i)+".key-row"); i++ {
		row := rowSelector("key-rows", i)
		id, err := strconv.ParseInt(strings.TrimSpace(b.Text(t, row+" > td:first-child")), 10, 64)
		if err != nil {
			t.Fatalf("key page, row %d: the first cell is not an id: %v", i, err)
		}
		r := keyRow{id: id, topic: strings.TrimSpace(b.Text(t, row+" > td:nth-child(3)"))}
		for _, where := range []string{"pending", "in flight", "backoff", "delayed", "delivered", "deduplicated", "dead letter"} {
			if b.Exists(t, row+fmt.Sprintf("[data-where=%q]", where)) {
				r.where = where
			}
		}
		out = append(out, r)
	}
	return out
}

func TestConsoleBrowser_OperatorFixesAnIncident(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	shots := t.TempDir()

	// (a) The receiver refuses refunds for good: 422, which the webhook
	// sink dead-letters at once.
	rcv := webhooktest.NewReceiver(t)
	const refusal = "refunds are closed for maintenance"
	refuse422(rcv, refusal, func(r *http.Request) bool { return r.Header.Get("Outbox-Topic") == "payments.refund" })

	secret, secretFile := consoleSecretFile(t)
	p := startProcess(t, consoleRelayEnv(db, rcv, "RELAY_CONSOLE_SECRET_FILE="+secretFile)...)
	base := relayConsole(t, p)
	p.waitLog(`"relay started"`)

	// (b) A pinned horizon: a nightly report holding a snapshot open.
	cfg, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "nightly-report"
	report, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { report.Close(context.Background()) })
	if _, err := report.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	if _, err := report.Exec(ctx, "SELECT 1 FROM "+db.Table("messages")+" LIMIT 1"); err != nil {
		t.Fatal(err)
	}

	// (c) A dead relay: registered, last seen ten minutes ago.
	const deadRelay = "relay-eu-west-2b"
	db.Exec(t, `INSERT INTO %s.relays (id, version, mode, started_at, last_seen)
	            VALUES ('`+deadRelay+`', 'v1.8.0', 'unordered', now() - interval '3 hours', now() - interval '10 minutes')`)

	// Ten orders, six refunds; order-42 has two of each, in this order:
	// created, refund, created, refund.
	var rows []seedRow
	var refunds [][]byte
	order := func(n int, key string) {
		rows = append(rows, seedRow{topic: "orders.created", key: key, headers: `{"Content-Type":"application/json"}`,
			payload: fmt.Appendf(nil, `{"order":"%s","total_cents":%d}`, key, 1000+n)})
	}
	refund := func(n int, key string) {
		pl := fmt.Appendf(nil, `{"order":"%s","refund":%d,"amount_cents":%d}`, key, n, 250*n)
		rows = append(rows, seedRow{topic: "payments.refund", key: key, headers: `{"Content-Type":"application/json"}`, payload: pl})
		refunds = append(refunds, pl)
	}
	order(0, "order-42")
	refund(1, "order-42")
	order(1, "order-42")
	refund(2, "order-42")
	for n := 2; n < 10; n++ {
		order(n, fmt.Sprintf("order-%d", 100+n))
	}
	for n := 3; n <= 6; n++ {
		refund(n, fmt.Sprintf("order-%d", 100+n))
	}
	insertSeedRows(t, db, rows)
	waitSettled(t, db, len(refunds))

	b := browsertest.New(t)
	outboxPage := base + "o/-/" + db.Name + "/"

	// The overview: the outbox's line shows six dead letters and says so.
	b.Navigate(t, base)
	line := fmt.Sprintf("tr.outbox[data-schema=%q]", db.Name)
	if got := strings.TrimSpace(b.Text(t, line+" .dead-count")); got != "6" {
		t.Errorf("overview: dead letters = %q, want 6", got)
	}
	if got := b.Text(t, line+" .problems"); !strings.Contains(got, "dead letters") {
		t.Errorf("overview: needs a look = %q, want it to mention the dead letters", got)
	}
	if got := b.Text(t, line+" .relays-alive"); !strings.Contains(got, "1 of 2") {
		t.Errorf("overview: relays alive = %q, want 1 of 2 (the relay and the dead one)", got)
	}
	b.Screenshot(t, screenshotPath(shots, "overview.png"))

	// Click through to the dead letters by cause: one group, the refusal.
	b.Click(t, line+" .dead-count")
	if loc := b.Location(t); !strings.HasSuffix(loc, "/dead") {
		t.Errorf("the dead-letter count links to %s, want the outbox's dead letters", loc)
	}
	findRefusal := func() deadGroup {
		t.Helper()
		for _, g := range readDeadGroups(t, b) {
			if strings.Contains(g.cause, "422") && strings.Contains(g.cause, refusal) {
				return g
			}
		}
		t.Fatalf("no dead-letter group names the refusal (422, %q); the page:\n%s", refusal, b.HTML(t))
		return deadGroup{}
	}
	if g := findRefusal(); g.count != "6" {
		t.Errorf("the refusal's group (%q) counts %s letters, want 6", g.cause, g.count)
	}
	if b.Exists(t, "button.retry-group") {
		t.Error("the dead letters page offers actions before anyone signed in")
	}

	// The horizon: the nightly report holds it.
	b.Navigate(t, base+"horizon")
	if got := b.Text(t, "table.holders"); !strings.Contains(got, "nightly-report") {
		t.Errorf("the horizon page does not name nightly-report:\n%s", got)
	}

	// The outbox: the dead relay shows as not seen.
	b.Navigate(t, outboxPage)
	if got := b.Text(t, "#relays tr.dead"); !strings.Contains(got, deadRelay) || !strings.Contains(got, "not seen") {
		t.Errorf("the outbox page's dead relay reads %q, want %s not seen", got, deadRelay)
	}
	if got := b.Text(t, "#relays"); !strings.Contains(got, "alive") {
		t.Errorf("the outbox page shows no live relay: %q", got)
	}

	// Sign in, and fix the receiver.
	b.Navigate(t, base+"signin")
	b.SetValue(t, "#secret", secret)
	b.Click(t, "#signin-submit")
	if !b.Exists(t, "#signout") {
		t.Fatalf("signing in did not work: %s\n%s", b.Location(t), b.HTML(t))
	}
	rcv.RespondWith(nil)

	// Retry the group: a dry run counts six, the confirmation retries six.
	b.Navigate(t, outboxPage+"dead")
	b.Screenshot(t, screenshotPath(shots, "dead-letters.png"))
	b.Click(t, findRefusal().row+" button.retry-group")
	if got := strings.TrimSpace(b.Text(t, "#count")); got != "6" {
		t.Errorf("the retry's dry run counts %q rows, want 6", got)
	}
	if n := db.Count(t, "dead_letters"); n != 6 {
		t.Errorf("the dry run changed the dead letters: %d left, want 6", n)
	}
	b.Click(t, "#confirm")
	if got := b.Text(t, "#result"); !strings.Contains(got, "Retried 6") {
		t.Errorf("the retry says %q, want Retried 6", got)
	}

	// The receiver gets every refund, byte for byte, and the overview's
	// dead letters drop to 0.
	waitfor.Condition(t, 30*time.Second, "the six refunds delivered and the hot table empty", func() bool {
		n := 0
		for _, r := range rcv.Received(t) {
			if r.Topic == "payments.refund" {
				n++
			}
		}
		return n == len(refunds) && db.Count(t, "messages_all") == 0
	})
	var got [][]byte
	for _, r := range rcv.Received(t) {
		if r.Topic == "payments.refund" {
			got = append(got, r.Payload)
		}
	}
	slices.SortFunc(got, bytes.Compare)
	want := slices.Clone(refunds)
	slices.SortFunc(want, bytes.Compare)
	if !slices.EqualFunc(got, want, bytes.Equal) {
		t.Errorf("the receiver got the refunds\n%q\nwant\n%q", got, want)
	}
	waitfor.Condition(t, 30*time.Second, "the overview to show no dead letters", func() bool {
		b.Navigate(t, base)
		return strings.TrimSpace(b.Text(t, line+" .dead-count")) == "0"
	})

	// What happened to order 42, from the outbox page's lookup.
	b.Navigate(t, outboxPage)
	b.SetValue(t, "#key-lookup", "order-42")
	b.Click(t, "#key-lookup-submit")
	if loc := b.Location(t); !strings.Contains(loc, "/key?key=order-42") {
		t.Errorf("the key lookup went to %s", loc)
	}
	kr := readKeyRows(t, b)
	var topics []string
	for i, r := range kr {
		topics = append(topics, r.topic)
		if i > 0 && r.id <= kr[i-1].id {
			t.Errorf("key page: row %d has id %d after %d: not in id order", i+1, r.id, kr[i-1].id)
		}
		if r.where != "delivered" {
			t.Errorf("key page: row %d (id %d, %s) is %q, want delivered", i+1, r.id, r.topic, r.where)
		}
	}
	// The refunds were retried as new rows: after the orders.
	if want := []string{"orders.created", "orders.created", "payments.refund", "payments.refund"}; !slices.Equal(topics, want) {
		t.Errorf("key page lists topics %q, want %q", topics, want)
	}
	b.Screenshot(t, screenshotPath(shots, "key.png"))

	// The retry's audit line.
	audits := logEntries(p, "console: retry dead letters")
	if len(audits) != 1 {
		t.Errorf("%d audit lines for the retry, want 1", len(audits))
	} else if audits[0]["retried"] != float64(6) {
		t.Errorf("the retry's audit line says retried %v, want 6: %v", audits[0]["retried"], audits[0])
	}

	b.NoScriptRan(t)
	if v := b.CSPViolations(); len(v) > 0 {
		t.Errorf("Content-Security-Policy violations: %q", v)
	}
}

func TestConsoleBrowser_HostileRowRendersAsText(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	rcv := webhooktest.NewReceiver(t)
	refuse422(rcv, "we do not take those", func(*http.Request) bool { return true })
	p := startProcess(t, consoleRelayEnv(db, rcv)...)
	base := relayConsole(t, p)

	const (
		topic   = `<script>alert(1)</script>`
		key     = `"onerror=alert(2) x="` + "\u202e" + `gnp.exe`
		header  = `<img src=x onerror=alert(3)>`
		payload = `<script>alert(4)</script><img src=x onerror=alert(5)>`
	)
	binary := []byte{0x00, 0xff, 0x01, 0xfe, 0x80, 0x7f, 'h', 'i', 0x00, 0x1b, '[', '2', 'J', 0xc3, 0x28, 0x0a}
	ids := insertSeedRows(t, db, []seedRow{
		{topic: topic, key: key, headers: fmt.Sprintf(`{"X-Note": %q}`, header), payload: []byte(payload)},
		{topic: topic, key: key, headers: fmt.Sprintf(`{"X-Note": %q}`, header), payload: []byte(payload)},
		{topic: "blobs.uploaded", key: "blob-1", payload: binary},
	})
	binaryID := ids[2]
	waitSettled(t, db, len(ids))

	b := browsertest.New(t)
	outboxPage := base + "o/-/" + db.Name + "/"
	harmless := func(what string) {
		t.Helper()
		if s := b.LastStatus(); s != http.StatusOK {
			t.Errorf("%s: status %d", what, s)
		}
		if b.Exists(t, "img") {
			t.Errorf("%s: an img element is in the document", what)
		}
		if b.Exists(t, "main script, main [onerror]") {
			t.Errorf("%s: a script element or an onerror attribute is in the document", what)
		}
		// Not even in a field's value, where the browser would obey it.
		if doc := b.HTML(t); strings.Contains(doc, "\u202e") {
			t.Errorf("%s: the right-to-left override is in the document as itself, not as ⟨U+202E⟩", what)
		}
	}

	b.Navigate(t, outboxPage+"dead")
	harmless("the dead letters by cause")
	groups := readDeadGroups(t, b)
	if len(groups) == 0 {
		t.Fatalf("no dead-letter group:\n%s", b.HTML(t))
	}
	var letters []string
	for i, g := range groups {
		if i > 0 {
			b.Navigate(t, outboxPage+"dead")
		}
		b.Click(t, g.row+" a.group-letters")
		harmless("the letters of group " + g.cause)
		for j := 1; b.Exists(t, rowSelector("dead-letters", j)+".dead-letter"); j++ {
			letters = append(letters, strings.TrimSpace(b.Text(t, rowSelector("dead-letters", j)+" a.letter")))
		}
	}
	if len(letters) != len(ids) {
		t.Errorf("the groups' pages list %d letters (%q), want %d", len(letters), letters, len(ids))
	}

	for _, id := range letters {
		b.Navigate(t, outboxPage+"dead/"+id)
		harmless("dead letter " + id)
		if id == strconv.FormatInt(binaryID, 10) {
			if got := b.Text(t, "#payload"); !strings.Contains(got, "00 ff 01 fe") || !b.Exists(t, "#payload.hex") {
				t.Errorf("dead letter %s: the binary payload is not a hex dump:\n%s", id, got)
			}
			continue
		}
		if got := b.Text(t, "#letter-topic"); got != topic {
			t.Errorf("dead letter %s: topic reads %q, want %q", id, got, topic)
		}
		if got, want := b.Text(t, "#letter-key"), `"onerror=alert(2) x="⟨U+202E⟩gnp.exe`; got != want {
			t.Errorf("dead letter %s: key reads %q, want %q", id, got, want)
		}
		if got := b.Text(t, "#letter-headers"); !strings.Contains(got, header) {
			t.Errorf("dead letter %s: headers read %q, want them to hold %q", id, got, header)
		}
		if got := b.Text(t, "#payload"); got != payload {
			t.Errorf("dead letter %s: payload reads %q, want %q", id, got, payload)
		}
	}

	// The key page, from the letter's key link.
	b.Navigate(t, outboxPage+"dead/"+strconv.FormatInt(ids[0], 10))
	b.Click(t, "#letter-key a")
	harmless("the hostile key's page")
	if loc, err := url.Parse(b.Location(t)); err != nil || loc.Query().Get("key") != key {
		t.Errorf("the key link went to %s (%v), want the page of key %q", loc, err, key)
	}
	kr := readKeyRows(t, b)
	if len(kr) != 2 || kr[0].id != ids[0] || kr[1].id != ids[1] || kr[0].where != "dead letter" || kr[1].where != "dead letter" {
		t.Errorf("the hostile key's page lists %+v, want rows %d and %d, dead letters", kr, ids[0], ids[1])
	}
	if got := b.Text(t, "h1"); !strings.Contains(got, "⟨U+202E⟩") {
		t.Errorf("the key page's title reads %q, want the override shown as ⟨U+202E⟩", got)
	}

	if d := b.Dialogs(); len(d) > 0 {
		t.Errorf("dialogs opened: %q", d)
	}
	b.NoScriptRan(t)
	if v := b.CSPViolations(); len(v) > 0 {
		t.Errorf("Content-Security-Policy violations: %q", v)
	}
}

// attackerSite serves, from another origin than the console's, a page with
// a plain form that posts a dead letter's purge, confirmed, to action.
func attackerSite(t *testing.T, action string, id int64) string {
	t.Helper()
	page := fmt.Sprintf(`<!doctype html><html><head><title>You won a prize</title></head><body>
<form method=post action="%s"><input name=id value="%d"><input name=confirm value=yes><button id=go>go</button></form>
</body></html>`, html.EscapeString(action), id)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, page)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/prize"
}

// oneDeadLetter returns the id of some dead letter of db.
func oneDeadLetter(t *testing.T, db *dbtest.Schema) int64 {
	t.Helper()
	var id int64
	if err := db.Pool.QueryRow(context.Background(), "SELECT min(id) FROM "+db.Table("dead_letters")).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// someDeadLetters makes three dead letters in db: relay p delivers rows to
// a receiver that refuses them all.
func someDeadLetters(t *testing.T, db *dbtest.Schema, p *process) {
	t.Helper()
	p.waitLog(`"relay started"`)
	insertSeedRows(t, db, []seedRow{
		{topic: "invoices.issued", key: "invoice-7", payload: []byte(`{"invoice":7}`)},
		{topic: "invoices.issued", key: "invoice-8", payload: []byte(`{"invoice":8}`)},
		{topic: "invoices.voided", key: "invoice-7", payload: []byte(`{"invoice":7,"void":true}`)},
	})
	waitSettled(t, db, 3)
}

func TestConsoleBrowser_ReadOnlyOffersNoActionAndRefusesAForgedPost(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	rcv := webhooktest.NewReceiver(t)
	refuse422(rcv, "invoices are handled elsewhere", func(*http.Request) bool { return true })
	relay := startProcess(t, "DATABASE_URL="+db.URL, "RELAY_SCHEMA="+db.Name, "WEBHOOK_URL="+rcv.URL, "WEBHOOK_SECRET="+rcv.Secret,
		"RELAY_POLL_INTERVAL=20ms", "RELAY_MAX_ATTEMPTS=2", "RELAY_BACKOFF_MIN=50ms", "RELAY_BACKOFF_MAX=100ms")
	someDeadLetters(t, db, relay)
	id := oneDeadLetter(t, db)

	// The standalone console, without a secret, on a port the kernel picks.
	p := startCommand(t, []string{"console", "--addr", "127.0.0.1:0"}, "DATABASE_URL="+db.URL, "RELAY_SCHEMA="+db.Name)
	base := standaloneConsole(t, p)
	if e := logEntries(p, "serving the console"); len(e) == 0 || e[0]["actions"] != false {
		t.Errorf("the console logs %v, want actions=false", e)
	}
	outboxPage := base + "o/-/" + db.Name + "/"

	b := browsertest.New(t)
	pages := []string{
		base,
		outboxPage,
		outboxPage + "dead",
		outboxPage + "dead/letters?reason=permanent",
		outboxPage + "dead/" + strconv.FormatInt(id, 10),
		outboxPage + "key?key=invoice-7",
	}
	for _, page := range pages {
		b.Navigate(t, page)
		if s := b.LastStatus(); s != http.StatusOK {
			t.Errorf("%s: status %d", page, s)
		}
		if !b.Exists(t, "#read-only") || !strings.Contains(b.Text(t, "#read-only"), "read-only") {
			t.Errorf("%s: no read-only badge", page)
		}
		if b.Exists(t, "form[method=post]") {
			t.Errorf("%s: a read-only page has a form that posts:\n%s", page, b.HTML(t))
		}
		for _, action := range []string{"button.retry-group", "button.purge-group", "input.select", "#retry-selected", "#purge-selected", "#retry-one", "#purge-one", "#cancel-key", "#signin"} {
			if b.Exists(t, action) {
				t.Errorf("%s: a read-only page offers %s", page, action)
			}
		}
	}
	b.Navigate(t, outboxPage+"dead/letters?reason=permanent")
	if !b.Exists(t, "tr.dead-letter") {
		t.Errorf("the letters page lists no dead letter:\n%s", b.HTML(t))
	}
	b.Navigate(t, base+"signin")
	if s := b.LastStatus(); s != http.StatusNotFound {
		t.Errorf("the read-only console's sign-in page answers %d, want 404", s)
	}

	// Another site's page posts a confirmed purge.
	b.Navigate(t, attackerSite(t, base+"o/-/"+db.Name+"/dead/purge", id))
	b.Click(t, "#go")
	if s := b.LastStatus(); s != http.StatusForbidden {
		t.Errorf("the forged purge was answered %d, want 403", s)
	}
	if got := b.Text(t, "#error"); !strings.Contains(got, "read-only") {
		t.Errorf("the forged purge's refusal says %q, want it to say the console is read-only", got)
	}
	if n := db.CountWhere(t, "dead_letters", "id = "+strconv.FormatInt(id, 10)); n != 1 {
		t.Errorf("the forged purge deleted dead letter %d", id)
	}
	if n := db.Count(t, "dead_letters"); n != 3 {
		t.Errorf("%d dead letters left, want 3", n)
	}
	b.NoScriptRan(t)
}

func TestConsoleBrowser_SignedInStillRefusesCrossSitePosts(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	rcv := webhooktest.NewReceiver(t)
	refuse422(rcv, "invoices are handled elsewhere", func(*http.Request) bool { return true })
	secret, secretFile := consoleSecretFile(t)
	p := startProcess(t, consoleRelayEnv(db, rcv, "RELAY_CONSOLE_SECRET_FILE="+secretFile)...)
	base := relayConsole(t, p)
	someDeadLetters(t, db, p)
	id := oneDeadLetter(t, db)

	b := browsertest.New(t)
	b.Navigate(t, base+"signin")
	b.SetValue(t, "#secret", secret)
	b.Click(t, "#signin-submit")
	if !b.Exists(t, "#signout") {
		t.Fatalf("signing in did not work: %s\n%s", b.Location(t), b.HTML(t))
	}

	// Another site's page (same host, another port: same site, so the
	// SameSite=Strict cookie goes along) posts a confirmed purge.
	b.Navigate(t, attackerSite(t, base+"o/-/"+db.Name+"/dead/purge", id))
	b.Click(t, "#go")
	if s := b.LastStatus(); s != http.StatusForbidden {
		t.Errorf("the forged purge was answered %d, want 403", s)
	}
	if got := b.Text(t, "#error"); !strings.Contains(got, "another site") {
		t.Errorf("the forged purge's refusal says %q, want it to say the request came from another site", got)
	}
	if n := db.CountWhere(t, "dead_letters", "id = "+strconv.FormatInt(id, 10)); n != 1 {
		t.Errorf("the forged purge deleted dead letter %d", id)
	}
	if n := db.Count(t, "dead_letters"); n != 3 {
		t.Errorf("%d dead letters left, want 3", n)
	}
	if len(logEntries(p, "console: purge dead letters")) > 0 {
		t.Error("the relay logged a purge")
	}

	// The operator is still signed in: the refusal was the cross-site
	// check's, not a missing session's.
	b.Navigate(t, base+"o/-/"+db.Name+"/dead")
	if !b.Exists(t, "button.purge-group") {
		t.Errorf("after the forged post the operator is no longer offered actions:\n%s", b.HTML(t))
	}
	b.NoScriptRan(t)
}
