package relay_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/internal/testkit/webhooktest"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/webhook"
)

// BenchmarkRelay_DrainBacklog measures the drain rate of a backlog of rows
// written with plain SQL, with the default settings, into an in-process
// JetStream server (which shares this process's CPU: compare runs of this
// benchmark, not machines). The `bench` subcommand measures against real
// servers, beside ../shared/refloop.
//
//	go test -run '^$' -bench DrainBacklog -benchtime 3x ./relay/
func BenchmarkRelay_DrainBacklog(b *testing.B) {
	const rows = 20000
	bb := setup(b)
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		relaytest.InsertRows(b, bb.db, rows, "events.orders.created")
		bb.db.Exec(b, "ANALYZE %s.messages")
		cfg := relay.Config{Schema: bb.db.Name, Sinks: map[string]sinks.Sink{"nats": bb.sink}, Logger: testLogger(b), Metrics: relay.NewMetrics()}
		b.StartTimer()
		began := time.Now()
		_, stop := relaytest.Start(b, bb.db.Pool, cfg)
		waitfor.Condition(b, 5*time.Minute, "the backlog to drain", func() bool {
			return testutil.ToFloat64(cfg.Metrics.Messages.WithLabelValues("nats", "delivered")) >= rows
		})
		total += time.Since(began)
		b.StopTimer()
		stop()
	}
	b.ReportMetric(float64(rows*b.N)/total.Seconds(), "events/s")
}

// BenchmarkRelay_WebhookMisbehavingReceiver measures how a receiver that
// misbehaves on some requests affects the others (issue: a misbehaving
// receiver must affect only the messages it misbehaves on). One run: 2,000
// rows to a receiver that answers 503 with Retry-After: 2 to a tenth of the
// first attempts and hangs past the timeout on another tenth; the healthy
// 80% are timed until the last of them is accepted, and so are the same
// rows against the same receiver fully healthy. It reports both rates and
// their ratio (goal: at least 0.5), with the default settings.
//
//	go test -run '^$' -bench WebhookMisbehaving -benchtime 1x ./relay/
func BenchmarkRelay_WebhookMisbehavingReceiver(b *testing.B) {
	const rows = 2000
	healthy := func(id string) bool { h := fnv.New32a(); h.Write([]byte(id)); return h.Sum32()%10 >= 2 }
	run := func(b *testing.B, misbehave bool) float64 {
		db := dbtest.New(b)
		rcv := webhooktest.NewReceiver(b)
		if misbehave {
			rcv.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
				id := r.Header.Get("webhook-id")
				h := fnv.New32a()
				h.Write([]byte(id))
				switch h.Sum32() % 10 {
				case 0:
					w.Header().Set("Retry-After", "2")
					w.WriteHeader(http.StatusServiceUnavailable)
					return http.StatusServiceUnavailable
				case 1:
					return rcv.Hang(r)
				}
				return 0
			})
		}
		secrets, err := webhook.ParseSecrets(rcv.Secret)
		if err != nil {
			b.Fatal(err)
		}
		sink, err := webhook.New(webhook.Config{URL: rcv.URL, Secrets: secrets, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = sink.Close() })
		db.Exec(b, `INSERT INTO %s.messages (topic, payload, idempotency_key) SELECT 'orders.created', '{}', 'evt-' || i FROM generate_series(1, $1) AS i`, rows)
		want := 0
		for i := 1; i <= rows; i++ {
			if healthy(fmt.Sprintf("evt-%d", i)) {
				want++
			}
		}
		began := time.Now()
		relaytest.Start(b, db.Pool, relay.Config{Schema: db.Name, Sinks: map[string]sinks.Sink{"webhook": sink},
			Logger: slog.New(slog.DiscardHandler), Metrics: relay.NewMetrics()})
		var took time.Duration
		waitfor.Condition(b, 5*time.Minute, "the healthy rows to be accepted", func() bool {
			n := 0
			var last time.Time
			for _, req := range rcv.Requests() {
				if req.Status < 300 && healthy(req.ID()) {
					n++
					last = req.At
				}
			}
			took = last.Sub(began)
			return n >= want
		})
		return float64(want) / took.Seconds()
	}
	for range b.N {
		clean := run(b, false)
		bad := run(b, true)
		b.ReportMetric(clean, "healthy-receiver-events/s")
		b.ReportMetric(bad, "misbehaving-receiver-healthy-events/s")
		b.ReportMetric(bad/clean, "ratio")
	}
}

// BenchmarkRelay_WebhookVersusBareLoop measures the webhook sink's drain
// rate at several WEBHOOK_CONCURRENCY settings against a bare Go loop that
// POSTs the same bodies with 64 requests in flight to the same receiver,
// alternately, and reports each ratio. The receiver reads the body and
// answers 204 after 2 ms, standing in for a service doing a little work;
// on loopback with no delay both are CPU-bound on the two cores. It chose
// the default concurrency (docs/benchmarks.md).
//
//	go test -run '^$' -bench WebhookVersusBareLoop -benchtime 1x ./relay/
func BenchmarkRelay_WebhookVersusBareLoop(b *testing.B) {
	const rows = 30000
	const receiverDelay = 2 * time.Millisecond
	var accepted atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(receiverDelay)
		accepted.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(srv.Close)
	body := bytes.Repeat([]byte("x"), 256)

	bare := func() float64 {
		accepted.Store(0)
		tr := &http.Transport{MaxIdleConnsPerHost: 64}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}
		var next atomic.Int64
		var wg sync.WaitGroup
		began := time.Now()
		for range 64 {
			wg.Go(func() {
				for next.Add(1) <= rows {
					req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
		return rows / time.Since(began).Seconds()
	}
	relayed := func(concurrency int) float64 {
		db := dbtest.New(b)
		secrets, err := webhook.ParseSecrets("whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("k"), 32)))
		if err != nil {
			b.Fatal(err)
		}
		sink, err := webhook.New(webhook.Config{URL: srv.URL, Secrets: secrets, Concurrency: concurrency, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		defer sink.Close()
		db.Exec(b, `INSERT INTO %s.messages (topic, payload) SELECT 'orders.created', convert_to(repeat('x', 256), 'UTF8') FROM generate_series(1, $1)`, rows)
		db.Exec(b, "ANALYZE %s.messages")
		cfg := relay.Config{Schema: db.Name, Sinks: map[string]sinks.Sink{"webhook": sink},
			Logger: slog.New(slog.DiscardHandler), Metrics: relay.NewMetrics()}
		began := time.Now()
		_, stop := relaytest.Start(b, db.Pool, cfg)
		defer stop()
		waitfor.Condition(b, 5*time.Minute, "the backlog to drain", func() bool {
			return testutil.ToFloat64(cfg.Metrics.Messages.WithLabelValues("webhook", "delivered")) >= rows
		})
		return rows / time.Since(began).Seconds()
	}
	for range b.N {
		for _, c := range webhookConcurrencies {
			base := bare()
			ours := relayed(c)
			b.Logf("WEBHOOK_CONCURRENCY=%d: relay %.0f events/s, bare loop (64 in flight) %.0f requests/s, ratio %.2f", c, ours, base, ours/base)
			b.ReportMetric(ours/base, fmt.Sprintf("ratio-at-%d", c))
		}
	}
}

// webhookConcurrencies are the WEBHOOK_CONCURRENCY settings
// BenchmarkRelay_WebhookVersusBareLoop compares.
var webhookConcurrencies = []int{16, 64, 128, 256}
