package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testdb"
	"github.com/outbox-relay/outbox-relay/internal/testnats"
	natssink "github.com/outbox-relay/outbox-relay/sinks/nats"
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
	db := testdb.New(t)
	srv := testnats.Start(t)
	srv.CreateStream(t, "EVENTS", "events.>")
	p := startProcess(t, relayEnv(db, srv, "NATS_SUBJECT_PREFIX=events.")...)
	relaytest.InsertRows(t, db, 10, "orders.created")
	relaytest.WaitDrained(t, db, 20*time.Second)
	// Outcomes are counted just after their settle commits.
	var metrics string
	relaytest.WaitFor(t, 10*time.Second, "/metrics to count the 10 deliveries", func() bool {
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
		"outbox_relay_stats_errors_total", "outbox_relay_retention_deleted_total", "outbox_relay_jetstream_problem",
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
	relaytest.WaitFor(t, 10*time.Second, "/readyz to fail while NATS is down", func() bool {
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
	relaytest.WaitFor(t, 20*time.Second, "/readyz to recover", func() bool {
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

func TestCheckJetStream_WarnsAboutMissingStreamsAndShortWindows(t *testing.T) {
	t.Parallel()
	srv := testnats.Start(t)
	sink, err := natssink.New(natssink.Config{URL: srv.URL(), JetStream: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	c, err := loadConfig([]string{"NATS_URL=" + srv.URL(), "NATS_SUBJECT_PREFIX=events."})
	if err != nil {
		t.Fatal(err)
	}
	check := func() (*prometheus.GaugeVec, string) {
		var logs bytes.Buffer
		problems := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "p"}, []string{"problem"})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		checkJetStream(ctx, sink, c, problems, slog.New(slog.NewTextHandler(&logs, nil)))
		return problems, logs.String()
	}

	problems, logs := check()
	if testutil.ToFloat64(problems.WithLabelValues("no_stream")) != 1 || !strings.Contains(logs, "no JetStream stream captures") {
		t.Errorf("without a stream: no_stream = %v, logs %q", testutil.ToFloat64(problems.WithLabelValues("no_stream")), logs)
	}

	srv.CreateStream(t, "EVENTS", "events.>") // the JetStream default window: 2 minutes
	problems, logs = check()
	if testutil.ToFloat64(problems.WithLabelValues("short_dedup_window")) != 1 || !strings.Contains(logs, "duplicate window is shorter") {
		t.Errorf("with a 2m window: short_dedup_window = %v, logs %q", testutil.ToFloat64(problems.WithLabelValues("short_dedup_window")), logs)
	}

	c.BackoffMax = time.Minute
	c.Lease = 30 * time.Second
	problems, logs = check()
	if testutil.ToFloat64(problems.WithLabelValues("short_dedup_window")) != 0 || testutil.ToFloat64(problems.WithLabelValues("no_stream")) != 0 {
		t.Errorf("with a window covering lease + backoff: problems reported; logs %q", logs)
	}
}
