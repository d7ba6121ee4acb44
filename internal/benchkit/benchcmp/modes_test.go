package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/bench"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// The table of -modes with -keys: per replicas count, each mode on rows
// without a key and on keyed rows, against unordered mode on the same rows
// and against refloop, then refloop on rows without a key.
func TestPrintModesTable_KeyedBesideUnkeyed(t *testing.T) {
	o := bench.Options{Mode: "backlog", N: 200000, PayloadBytes: 256, Burst: true, Keys: 5000, KeyOrder: bench.KeyInterleaved}
	shapes := modesShapes(o)
	if len(shapes) != 2 || shapes[0].keys != 0 || shapes[1] != (modesShape{5000, bench.KeyInterleaved}) {
		t.Fatalf("modesShapes = %v, want unkeyed and 5000 keys interleaved", shapes)
	}
	res := func(secs float64) []bench.Result {
		return []bench.Result{{Events: 200000, Seconds: secs, EventsPerSec: 200000 / secs}}
	}
	cell := modesCell{replicas: 4, workers: 8, refloop: &modesRun{results: res(4)}}
	for _, s := range shapes {
		for _, m := range modesModes {
			secs := 5.0
			if s.keys > 0 && m != outbox.ModeUnordered {
				secs = 10
			}
			r := &modesRun{mode: m, shape: s, results: res(secs), vsRefloop: []float64{4 / secs}}
			if m != outbox.ModeUnordered {
				r.vsUnordered = []float64{5 / secs}
			}
			cell.relays = append(cell.relays, r)
		}
	}
	var out bytes.Buffer
	printModesTable(&out, o, []modesCell{cell})
	for _, want := range []string{
		"Keyed rows: 5000 keys, about 40 rows each, interleaved",
		"| replicas | relay | rows | drain s | events/s | / unordered, same rows | / refloop | buckets shared after |",
		"| 4 | unordered | unkeyed | 5.0 | 40000 | — | 0.80 | — |",
		"| 4 | partitioned | 5000 keys, interleaved | 10.0 | 20000 | 0.50 | 0.40 | not before the end |",
		"| 4 | ordered | 5000 keys, interleaved | 10.0 | 20000 | 0.50 | 0.40 | — |",
		"| 4 | refloop (8 workers) | unkeyed (takes no keys) | 4.0 | 50000 | — | — | — |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if rows := strings.Count(out.String(), "\n| 4 |"); rows != 7 {
		t.Errorf("%d rows for 4 replicas, want 7 (3 modes × 2 shapes, refloop):\n%s", rows, out.String())
	}
}
