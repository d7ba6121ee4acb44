package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/bench"
	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
)

// TestBench_EveryModeReportsSaneFigures is the smoke of every bench mode: a
// tiny run of each against a real PostgreSQL and an in-process NATS server
// reports its figures from delivered and settled rows, and they are sane.
// It checks no timing: speed is for the benchmark itself.
func TestBench_EveryModeReportsSaneFigures(t *testing.T) {
	tests := []struct {
		name    string
		opts    bench.Options
		latency bool
	}{
		{"backlog", bench.Options{Mode: "backlog", N: 300, PayloadBytes: 256}, false},
		{"steady", bench.Options{Mode: "steady", N: 200, PayloadBytes: 256, Rate: 400}, true},
		{"ordered", bench.Options{Mode: "backlog", N: 300, PayloadBytes: 256, Keys: 10, Relay: relay.Config{Mode: outbox.ModeOrdered}}, false},
		{"partitioned, grouped keys", bench.Options{Mode: "backlog", N: 300, PayloadBytes: 256, Keys: 10, KeyOrder: bench.KeyGrouped, Replicas: 2, Burst: true, Relay: relay.Config{Mode: outbox.ModePartitioned}}, false},
		{"large payloads", bench.Options{Mode: "backlog", N: 40, PayloadBytes: 64 << 10, Relay: relay.Config{MaxInFlightBytes: 256 << 10}}, false},
		{"notify", bench.Options{Mode: "steady", N: 100, PayloadBytes: 256, Rate: 200, Relay: relay.Config{Notify: true}}, true},
		{"producers with rows per transaction", bench.Options{Mode: "steady", N: 200, PayloadBytes: 256, Rate: 400, Producers: 4, RowsPerTx: 10}, true},
		{"history and chosen keys", bench.Options{Mode: "backlog", N: 300, PayloadBytes: 256, Archived: 2000, ChosenKeys: true}, false},
		{"not yet due", bench.Options{Mode: "backlog", N: 300, PayloadBytes: 256, NotDue: 2000}, false},
		{"replicas", bench.Options{Mode: "backlog", N: 300, PayloadBytes: 256, Replicas: 2, Burst: true}, false},
		{"partitioned replicas", bench.Options{Mode: "backlog", N: 300, PayloadBytes: 256, Replicas: 2, Burst: true, Relay: relay.Config{Mode: outbox.ModePartitioned}}, false},
		{"partitioned replicas steady", bench.Options{Mode: "steady", N: 200, PayloadBytes: 256, Rate: 400, Replicas: 2, Relay: relay.Config{Mode: outbox.ModePartitioned}}, true},
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
			if res.Ordered != (o.Relay.Mode == outbox.ModeOrdered) || res.PayloadBytes != o.PayloadBytes || res.Mode != o.Mode ||
				res.DeliveryMode != bench.DeliveryMode(o.Relay) || res.Replicas != max(o.Replicas, 1) {
				t.Errorf("result %s does not describe the run", out.String())
			}
			if o.Mode == "backlog" && res.Extra["burst"] != o.Burst {
				t.Errorf("extra burst = %v, want %v", res.Extra["burst"], o.Burst)
			}
			checkReplicas(t, o, res)
			for key, want := range map[string]float64{"archived": float64(o.N), "outbox_left": 0, "stream_msgs": float64(o.N)} {
				if got, ok := res.Extra[key].(float64); !ok || got != want {
					t.Errorf("extra %s = %v, want %v", key, res.Extra[key], want)
				}
			}
			if rss, ok := res.Extra["peak_rss_mb"].(float64); !ok || rss <= 0 {
				t.Errorf("peak_rss_mb = %v, want a positive figure", res.Extra["peak_rss_mb"])
			}
			for _, key := range []string{"claim_p50_ms", "claim_p99_ms", "settle_p50_ms", "settle_p99_ms", bench.ExtraRelayCPU} {
				if v, ok := res.Extra[key].(float64); !ok || v < 0 {
					t.Errorf("extra %s = %v, want a figure", key, res.Extra[key])
				}
			}
			if res.Extra["claim_p50_ms"].(float64) > res.Extra["claim_p99_ms"].(float64) {
				t.Errorf("claim p50 %v above its p99 %v", res.Extra["claim_p50_ms"], res.Extra["claim_p99_ms"])
			}
			switch v := res.Extra[bench.ExtraPostgresCPU].(type) {
			case float64:
				if v < 0 { // a tiny run may take less than the clock's tick of 10 ms
					t.Errorf("PostgreSQL CPU per 100k events = %v, want a figure", v)
				}
			case string:
				if !strings.HasPrefix(v, "unavailable: ") {
					t.Errorf("PostgreSQL CPU = %q, want a figure or the reason it is unavailable", v)
				}
			default:
				t.Errorf("PostgreSQL CPU = %v, want a figure or the reason it is unavailable", v)
			}
			if o.Mode == "backlog" {
				// Both figures are rounded to 0.1 ms: a first delivery
				// seen at the end of a tiny run may round above the run.
				if v, ok := res.Extra["first_delivery_ms"].(float64); !ok || v <= 0 || v > res.Seconds*1000+0.1 {
					t.Errorf("first_delivery_ms = %v, want a figure within the run's %v s", res.Extra["first_delivery_ms"], res.Seconds)
				}
			}
			// Keyed rows in ordered and partitioned mode: the stream holds
			// each key's rows in order (checked by the run's verification).
			if n, ok := res.Extra[bench.ExtraOutOfOrder].(float64); (o.Keys > 0 && o.Relay.Mode != "") != ok || n != 0 {
				t.Errorf("extra %s = %v, want 0 for keyed rows in ordered or partitioned mode, absent otherwise", bench.ExtraOutOfOrder, res.Extra[bench.ExtraOutOfOrder])
			}
			if res.Keys != o.Keys || (o.Keys > 0) != (res.KeyOrder != "") {
				t.Errorf("result keys %d, key order %q, want %d keys and an order when keyed", res.Keys, res.KeyOrder, o.Keys)
			}
			if tt.latency {
				if res.P50ms == nil || res.P99ms == nil || res.MaxMs == nil || *res.P50ms <= 0 || *res.P50ms > *res.P99ms || *res.P99ms > *res.MaxMs {
					t.Errorf("latency p50 %v, p99 %v, max %v: want 0 < p50 <= p99 <= max", res.P50ms, res.P99ms, res.MaxMs)
				}
			} else if res.P50ms != nil || res.P99ms != nil {
				t.Errorf("a backlog run reported latencies: %s", out.String())
			}
		})
	}
}

// checkReplicas checks what a run with several relays or in partitioned
// mode reports: every relay delivered, the deliveries add up to the events,
// and the buckets were owned, then shared, within the run (when it lasted
// long enough to see it: a steady run waits for it).
func checkReplicas(t *testing.T, o bench.Options, res bench.Result) {
	t.Helper()
	each, ok := res.Extra[bench.ExtraDeliveriesPerRelay].([]any)
	switch {
	case o.Replicas <= 1 && ok:
		t.Errorf("%s = %v with one relay", bench.ExtraDeliveriesPerRelay, each)
	case o.Replicas > 1 && len(each) != o.Replicas:
		t.Errorf("%s = %v, want one count per relay", bench.ExtraDeliveriesPerRelay, res.Extra[bench.ExtraDeliveriesPerRelay])
	case o.Replicas > 1:
		sum := 0.0
		for _, n := range each {
			sum += n.(float64)
		}
		if sum != float64(o.N) {
			t.Errorf("%s = %v adds up to %v, want %d", bench.ExtraDeliveriesPerRelay, each, sum, o.N)
		}
	}
	owned, hasOwned := res.Extra[bench.ExtraBucketsOwned].(float64)
	shared, hasShared := res.Extra[bench.ExtraBucketsShared].(float64)
	switch {
	case o.Relay.Mode != outbox.ModePartitioned && (hasOwned || hasShared):
		t.Errorf("buckets reported outside partitioned mode: owned %v, shared %v", owned, shared)
	case o.Relay.Mode == outbox.ModePartitioned && o.Mode == "steady" && (!hasOwned || !hasShared):
		t.Errorf("a steady partitioned run did not report its buckets: owned %v, shared %v", res.Extra[bench.ExtraBucketsOwned], res.Extra[bench.ExtraBucketsShared])
	case hasShared && (!hasOwned || owned > shared || owned <= 0):
		t.Errorf("buckets owned after %v ms, shared after %v ms: want 0 < owned <= shared", owned, shared)
	}
}

// TestBench_PrepareBacklogBurstAndMode: -burst gives every row of the backlog
// one available_at, already due, and a partitioned run's schema is in
// partitioned mode, with the index of its claims, before the backlog is
// written.
func TestBench_PrepareBacklogBurstAndMode(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	srv := natstest.Start(t)
	o := bench.Options{
		DatabaseURL: db.URL, NatsURL: srv.URL(), Schema: db.Name, Mode: "backlog", N: 500, PayloadBytes: 64,
		Burst: true, Relay: relay.Config{Mode: outbox.ModePartitioned},
	}
	if err := bench.PrepareBacklog(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	var rows, times int
	var due bool
	err := db.Pool.QueryRow(context.Background(), "SELECT count(*), count(DISTINCT available_at), bool_and(available_at < now()) FROM "+db.Table("messages")).Scan(&rows, &times, &due)
	if err != nil || rows != o.N || times != 1 || !due {
		t.Errorf("backlog: %d rows, %d distinct available_at, all due %v (%v); want %d rows due at one time", rows, times, due, err, o.N)
	}
	var mode outbox.Mode
	var indexed bool
	err = db.Pool.QueryRow(context.Background(), "SELECT (SELECT mode FROM "+db.Table("relay_mode")+"), to_regclass($1) IS NOT NULL",
		db.Name+".messages_bucket_due_idx").Scan(&mode, &indexed)
	if err != nil || mode != outbox.ModePartitioned || !indexed {
		t.Errorf("schema mode %q, bucket index %v (%v); want partitioned with its index", mode, indexed, err)
	}
}
