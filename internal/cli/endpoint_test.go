package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestEndpoint_ProbesMetricsAndHealthcheck(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "EVENTS", "events.>")
	p := startProcess(t, relayEnv(db, srv, "NATS_SUBJECT_PREFIX=events.")...)
	relaytest.InsertRows(t, db, 10, "orders.created")
	relaytest.WaitDrained(t, db, 20*time.Second)
	// Outcomes are counted just after their settle commits.
	var metrics string
	waitfor.Condition(t, 10*time.Second, "/metrics to count the 10 deliveries", func() bool {
		metrics = p.metrics()
		return strings.Contains(metrics, `outbox_relay_messages_total{outcome="delivered",sink="nats"} 10`)
	})
	base := "http://" + p.addr

	if code, body := get(t, base+"/livez"); code != 200 || body != "ok\n" {
		t.Errorf("/livez = %d %q", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != 200 {
		t.Errorf("/readyz = %d %q, want 200", code, body)
	}
	for _, name := range []string{
		"outbox_relay_messages_total", "outbox_relay_claim_duration_seconds", "outbox_relay_claim_rows",
		"outbox_relay_claim_errors_total", "outbox_relay_lease_rescues_total", "outbox_relay_lease_lost_total",
		"outbox_relay_in_flight", "outbox_relay_delivery_latency_seconds", "outbox_relay_deliver_duration_seconds",
		"outbox_relay_settle_duration_seconds", "outbox_relay_settle_errors_total", "outbox_relay_sink_available",
		"outbox_relay_backlog", "outbox_relay_oldest_due_age_seconds", "outbox_relay_in_backoff",
		"outbox_relay_dead_letters", "outbox_relay_hot_table_dead_tuples", "outbox_relay_lock_waits",
		"outbox_relay_stats_errors_total", "outbox_relay_retention_deleted_total", "outbox_relay_sink_problem",
		"go_goroutines", "process_cpu_seconds_total",
	} {
		if !strings.Contains(metrics, "\n# TYPE "+name+" ") {
			t.Errorf("/metrics has no %s", name)
		}
	}

	env := []string{"RELAY_HTTP_ADDR=" + p.addr}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"healthcheck"}, env, &stdout, &stderr); code != exitOK {
		t.Errorf("healthcheck exit %d (%s), want 0 while ready", code, stderr.String())
	}

	srv.Stop()
	waitfor.Condition(t, 10*time.Second, "/readyz to fail while NATS is down", func() bool {
		code, _ := get(t, base+"/readyz")
		return code == http.StatusServiceUnavailable
	})
	_, body := get(t, base+"/readyz")
	if !strings.Contains(body, "sink nats") {
		t.Errorf("/readyz body %q does not say which sink", body)
	}
	stderr.Reset()
	if code := run(context.Background(), []string{"healthcheck"}, env, &stdout, &stderr); code != exitFailure || !strings.Contains(stderr.String(), "503") {
		t.Errorf("healthcheck exit %d (%s), want 1 with the status while NATS is down", code, stderr.String())
	}
	srv.Restart()
	waitfor.Condition(t, 20*time.Second, "/readyz to recover", func() bool {
		code, _ := get(t, base+"/readyz")
		return code == http.StatusOK
	})
}

func TestHealthcheck_FailsWhenNothingListens(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"healthcheck", "--timeout", "1s"}, []string{"RELAY_HTTP_ADDR=127.0.0.1:1"}, &stdout, &stderr)
	if code != exitFailure {
		t.Errorf("exit %d, want %d; stderr %s", code, exitFailure, stderr.String())
	}
}

func TestProcess_AnUnreachableSinkIsLoudAndLivezAnswers(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := natstest.Start(t)
	srv.Stop()
	p := startProcess(t, relayEnv(db, srv, "NATS_SUBJECT_PREFIX=events.", "NATS_STREAM=EVENTS")...)
	p.waitLog(`"sink unavailable: its rows wait in the table`)
	if code, _ := get(t, "http://"+p.addr+"/livez"); code != 200 {
		t.Errorf("/livez = %d while NATS is down, want 200", code)
	}
	if code, body := get(t, "http://"+p.addr+"/readyz"); code != 503 || !strings.Contains(body, "sink nats") {
		t.Errorf("/readyz = %d %q while NATS is down", code, body)
	}
	unavailable := 0
	for _, l := range p.log() {
		if strings.Contains(l, `"sink unavailable`) {
			unavailable++
			if !strings.Contains(l, `"level":"ERROR"`) || !strings.Contains(l, `"reason"`) {
				t.Errorf("the line is not an error with the reason: %s", l)
			}
		}
	}
	if unavailable != 1 {
		t.Errorf("%d 'sink unavailable' lines, want 1", unavailable)
	}
	srv.Restart()
	p.waitLog(`"sink available again"`)
	relaytest.InsertRows(t, db, 5, "orders.created")
	relaytest.WaitDrained(t, db, 30*time.Second)
}
