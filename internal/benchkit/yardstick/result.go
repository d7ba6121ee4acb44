package main

import (
	"encoding/json"
	"io"
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// result is the JSON line a run prints: the fields of the relay's bench
// line (internal/bench.Result) that a loop without the relay's modes has,
// so that internal/benchkit/benchcmp reads both alike.
type result struct {
	Name          string         `json:"name"`
	Events        int            `json:"events"`
	Seconds       float64        `json:"seconds"`
	EventsPerSec  float64        `json:"events_per_sec"`
	P50ms         *float64       `json:"p50_ms"`
	P99ms         *float64       `json:"p99_ms"`
	MaxMs         *float64       `json:"max_ms,omitempty"`
	Mode          string         `json:"mode"`
	Batch         int            `json:"batch"`
	Workers       int            `json:"workers"`
	PayloadBytes  int            `json:"payload_bytes"`
	InsertSeconds float64        `json:"insert_seconds,omitempty"`
	LatencyBasis  string         `json:"latency_basis,omitempty"`
	Verified      bool           `json:"verified"`
	GOMAXPROCS    int            `json:"gomaxprocs"`
	StartedAt     string         `json:"started_at"`
	Extra         map[string]any `json:"extra,omitempty"`
}

// setThroughput records events delivered over d.
func (r *result) setThroughput(events int, d time.Duration) {
	r.Events = events
	r.Seconds = round(d.Seconds(), 4)
	if d > 0 {
		r.EventsPerSec = round(float64(events)/d.Seconds(), 1)
	}
}

func (r *result) write(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// writeError writes the line of a failed run.
func writeError(w io.Writer, err error) {
	_ = json.NewEncoder(w).Encode(map[string]string{"name": "yardstick", "error": err.Error()})
}

func round(v float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(v*p) / p
}

// latencies records, per row id, when the producer's commit returned and
// when JetStream acknowledged the row, in Unix nanoseconds. Ids outside
// 1..n are ignored.
type latencies struct {
	commit, ack []atomic.Int64
}

func newLatencies(n int) *latencies {
	return &latencies{commit: make([]atomic.Int64, n+1), ack: make([]atomic.Int64, n+1)}
}

func (l *latencies) committed(id int64, t time.Time) {
	if id > 0 && id < int64(len(l.commit)) {
		l.commit[id].Store(t.UnixNano())
	}
}

func (l *latencies) acked(id int64, t time.Time) {
	if id > 0 && id < int64(len(l.ack)) {
		l.ack[id].CompareAndSwap(0, t.UnixNano())
	}
}

// percentiles returns p50, p99 and the maximum in milliseconds over the
// rows with both times, and how many rows had them.
func (l *latencies) percentiles() (p50, p99, worst float64, n int) {
	var d []int64
	for i := range l.commit {
		c, a := l.commit[i].Load(), l.ack[i].Load()
		if c != 0 && a != 0 {
			d = append(d, a-c)
		}
	}
	if len(d) == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(d)
	at := func(q float64) float64 { return round(float64(d[int(float64(len(d)-1)*q)])/1e6, 3) }
	return at(0.50), at(0.99), at(1), len(d)
}
