package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/bench"
	"github.com/outbox-relay/outbox-relay/internal/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/natstest"
	"github.com/outbox-relay/outbox-relay/relay"
)

// TestRun_EveryModeReportsSaneFigures is the smoke of every bench mode: a
// tiny run of each against a real PostgreSQL and an in-process NATS server
// reports its figures from delivered and settled rows, and they are sane.
// It checks no timing: speed is for the benchmark itself.
func TestRun_EveryModeReportsSaneFigures(t *testing.T) {
	tests := []struct {
		name    string
		opts    bench.Options
		latency bool
	}{
		{"backlog", bench.Options{Mode: "backlog", N: 300, PayloadBytes: 256}, false},
		{"steady", bench.Options{Mode: "steady", N: 200, PayloadBytes: 256, Rate: 400}, true},
		{"ordered", bench.Options{Mode: "backlog", N: 300, PayloadBytes: 256, Keys: 10, Relay: relay.Config{Ordered: true}}, false},
		{"large payloads", bench.Options{Mode: "backlog", N: 40, PayloadBytes: 64 << 10, Relay: relay.Config{MaxInFlightBytes: 256 << 10}}, false},
		{"notify", bench.Options{Mode: "steady", N: 100, PayloadBytes: 256, Rate: 200, Relay: relay.Config{Notify: true}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := dbtest.NewEmpty(t) // the run creates the scratch schema; the test drops it
			srv := natstest.Start(t)
			o := tt.opts
			o.DatabaseURL, o.NatsURL, o.Schema = db.URL, srv.URL(), db.Name
			var out bytes.Buffer
			if err := bench.Run(context.Background(), o, &out); err != nil {
				t.Fatalf("bench: %v", err)
			}
			var res bench.Result
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatalf("result %q: %v", out.String(), err)
			}
			if !res.Verified || res.Events != o.N || res.Seconds <= 0 || res.EventsPerSec <= 0 {
				t.Errorf("result %s: want verified, %d events, a positive duration and rate", out.String(), o.N)
			}
			if res.Ordered != o.Relay.Ordered || res.PayloadBytes != o.PayloadBytes || res.Mode != o.Mode {
				t.Errorf("result %s does not describe the run", out.String())
			}
			for key, want := range map[string]float64{"archived": float64(o.N), "outbox_left": 0, "stream_msgs": float64(o.N)} {
				if got, ok := res.Extra[key].(float64); !ok || got != want {
					t.Errorf("extra %s = %v, want %v", key, res.Extra[key], want)
				}
			}
			if rss, ok := res.Extra["peak_rss_mb"].(float64); !ok || rss <= 0 {
				t.Errorf("peak_rss_mb = %v, want a positive figure", res.Extra["peak_rss_mb"])
			}
			if tt.latency {
				if res.P50ms == nil || res.P99ms == nil || *res.P50ms <= 0 || *res.P50ms > *res.P99ms {
					t.Errorf("latency p50 %v, p99 %v: want 0 < p50 <= p99", res.P50ms, res.P99ms)
				}
			} else if res.P50ms != nil || res.P99ms != nil {
				t.Errorf("a backlog run reported latencies: %s", out.String())
			}
		})
	}
}
