package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
)

// bin is the yardstick built once for the tests, as make bench builds it.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "yardstick-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "yardstick")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the yardstick: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// bundle is what a test runs the yardstick against: a fresh, empty schema
// and a NATS server of its own (the stream's name is fixed).
type bundle struct {
	schema *dbtest.Schema
	nats   *natstest.Server
}

func setup(t *testing.T) *bundle {
	t.Helper()
	s := dbtest.NewEmpty(t)
	s.Exec(t, "CREATE SCHEMA "+pgx.Identifier{s.Name}.Sanitize())
	return &bundle{schema: s, nats: natstest.Start(t)}
}

// line is the yardstick's output: a result, or an error.
type line struct {
	result
	Error string `json:"error"`
}

// run runs the binary with args after the bundle's database, schema and
// NATS server, and returns its line and exit status.
func (b *bundle) run(t *testing.T, args ...string) (line, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args = append([]string{"-dsn", b.schema.URL, "-schema", b.schema.Name, "-nats", b.nats.URL()}, args...)
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("run the yardstick: %v", err)
	}
	var l line
	if err := json.Unmarshal(bytes.TrimSpace(out), &l); err != nil {
		t.Fatalf("the yardstick's output %q is not one JSON line (stderr %q): %v", out, stderr.String(), err)
	}
	return l, code
}

// A backlog is drained: every row reaches the stream once, byte for byte
// (subject, payload, headers, its id as Nats-Msg-Id), and leaves the hot
// table for the archive.
func TestYardstick_DrainsBacklogByteForByte(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n, size = 300, 300
	res, code := b.run(t, "-n", strconv.Itoa(n), "-payload", strconv.Itoa(size), "-batch", "64", "-workers", "2", "-burst")
	if code != 0 || res.Error != "" {
		t.Fatalf("exit %d: %s", code, res.Error)
	}
	if !res.Verified || res.Events != n || res.EventsPerSec <= 0 || res.Extra["claims"].(float64) < n/64 {
		t.Fatalf("result %+v: want verified, %d events, a rate, at least %d claims", res.result, n, n/64)
	}
	if left := b.schema.Count(t, "outbox"); left != 0 {
		t.Errorf("%d rows left in the hot table", left)
	}

	archived := map[string]*struct {
		topic   string
		payload []byte
		headers map[string]string
	}{}
	rows, err := b.schema.Pool.Query(context.Background(), "SELECT id, topic, payload, headers FROM "+b.schema.Table("outbox_archive"))
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	var rowTopic string
	var rowPayload []byte
	var rowHeaders map[string]string
	if _, err := pgx.ForEachRow(rows, []any{&id, &rowTopic, &rowPayload, &rowHeaders}, func() error {
		archived[strconv.FormatInt(id, 10)] = &struct {
			topic   string
			payload []byte
			headers map[string]string
		}{rowTopic, rowPayload, rowHeaders}
		rowPayload, rowHeaders = nil, nil
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(archived) != n {
		t.Fatalf("%d rows archived, want %d", len(archived), n)
	}

	msgs := b.nats.Messages(t, streamName)
	if len(msgs) != n {
		t.Fatalf("%d messages in the stream, want %d", len(msgs), n)
	}
	seen := map[string]bool{}
	for _, m := range msgs {
		msgID := m.Header.Get("Nats-Msg-Id")
		row, ok := archived[msgID]
		if !ok || seen[msgID] {
			t.Fatalf("message with Nats-Msg-Id %q: archived %v, seen before %v", msgID, ok, seen[msgID])
		}
		seen[msgID] = true
		seq, _ := strconv.ParseInt(msgID, 10, 64)
		switch {
		case m.Subject != row.topic || m.Subject != topic:
			t.Errorf("row %s: subject %q, want %q", msgID, m.Subject, row.topic)
		case !bytes.Equal(m.Data, row.payload) || len(m.Data) != size:
			t.Errorf("row %s: payload %q, want the row's %q (%d bytes)", msgID, m.Data, row.payload, size)
		case !bytes.Equal(m.Data, payload(seq, size)):
			t.Errorf("row %s: payload %q, want the one loaded as row %d", msgID, m.Data, seq)
		}
		for k, v := range row.headers {
			if got := m.Header.Values(k); len(got) != 1 || got[0] != v {
				t.Errorf("row %s: header %s = %q, want %q", msgID, k, got, v)
			}
		}
		if len(m.Header) != len(row.headers)+1 {
			t.Errorf("row %s: headers %v, want the row's %v and Nats-Msg-Id", msgID, m.Header, row.headers)
		}
	}
}

// A steady stream is delivered as it is produced, and the line reports
// commit → ack latency.
func TestYardstick_SteadyReportsLatency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 200
	res, code := b.run(t, "-mode", "steady", "-n", strconv.Itoa(n), "-rate", "1000", "-producers", "2", "-producer-batch", "5")
	if code != 0 || res.Error != "" {
		t.Fatalf("exit %d: %s", code, res.Error)
	}
	if !res.Verified || res.Events != n || res.P50ms == nil || res.P99ms == nil || *res.P99ms < *res.P50ms {
		t.Fatalf("result %+v: want verified, %d events, p50 <= p99", res.result, n)
	}
	if got := b.nats.Count(t, streamName); got != n {
		t.Errorf("%d messages in the stream, want %d", got, n)
	}
}

// With -workers 0 it loads the backlog and drains nothing (benchcmp
// measures the load's PostgreSQL CPU so): the rows stay, the line says
// so, and the run is not verified.
func TestYardstick_ZeroWorkersOnlyLoad(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, code := b.run(t, "-n", "150", "-workers", "0")
	if code != 0 || res.Error != "" {
		t.Fatalf("exit %d: %s", code, res.Error)
	}
	if res.Verified || res.Events != 0 || res.Extra["outbox_left"].(float64) != 150 {
		t.Fatalf("result %+v: want 150 rows left, none delivered, not verified", res.result)
	}
	if got := b.schema.Count(t, "outbox"); got != 150 {
		t.Errorf("%d rows in the hot table, want 150", got)
	}
	if got := b.nats.Count(t, streamName); got != 0 {
		t.Errorf("%d messages in the stream, want none", got)
	}
}

// Tables of the same names that it did not make (a loop from elsewhere's,
// an application's) are refused and left as they are.
func TestYardstick_RefusesTablesItDidNotMake(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.schema.Exec(t, "CREATE TABLE "+b.schema.Table("outbox_archive")+" (id bigint PRIMARY KEY)")
	b.schema.Exec(t, "INSERT INTO "+b.schema.Table("outbox_archive")+" VALUES (7)")
	res, code := b.run(t, "-n", "10")
	if code != 1 || !strings.Contains(res.Error, "not made by the yardstick") {
		t.Fatalf("exit %d, error %q: want 1 and a refusal", code, res.Error)
	}
	if got := b.schema.Count(t, "outbox_archive"); got != 1 {
		t.Errorf("the table it refused holds %d rows, want its one", got)
	}
}
