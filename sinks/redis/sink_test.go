package redis_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/redistest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/sinks"
	redissink "github.com/outbox-relay/outbox-relay/sinks/redis"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

const prefix = "test:"

// harness makes the sinks the conformance and hostile-row suites run
// against, each with a redis-server of its own.
var harness = sinktest.Harness{
	New: func(t testing.TB) (sinks.Sink, sinktest.Destination) {
		srv := redistest.Start(t)
		return newSink(t, srv, nil), &destination{srv: srv}
	},
	// A stream name with a control character: refused before sending.
	Reject: func(m *sinks.Message) { m.Topic = "refused\x00" },
	// Redis keeps both copies of an entry appended twice. The destination
	// reads every stream of its server.
	Features: sinktest.Features{Headers: true, DedupsByKey: false, Outage: true, EveryTopic: true},
}

func TestSink_Conformance(t *testing.T) {
	sinktest.Run(t, harness)
}

func TestSink_HostileRows(t *testing.T) {
	t.Parallel()
	sinktest.RunHostile(t, harness)
}

func FuzzHostileRows(f *testing.F) {
	sinktest.FuzzHostile(f, harness)
}

// destination is every stream of a server, as the suite sees it.
type destination struct{ srv *redistest.Server }

func (d *destination) Received(t testing.TB) []sinktest.Received {
	var out []sinktest.Received
	for _, e := range d.srv.AllEntries(t) {
		out = append(out, received(e))
	}
	return out
}

func (d *destination) Break(t testing.TB) { d.srv.Stop(t) }

func (d *destination) Purge(t testing.TB) { d.srv.FlushAll(t) }

func received(e redistest.Entry) sinktest.Received {
	r := sinktest.Received{Topic: strings.TrimPrefix(e.Stream, prefix), Headers: map[string][]string{}}
	for _, f := range e.Fields {
		switch name, value := f[0], f[1]; {
		case name == redissink.FieldPayload:
			r.Payload = []byte(value)
		case name == redissink.FieldIdempotencyKey:
			r.IdempotencyKey = value
		case strings.HasPrefix(name, redissink.HeaderFieldPrefix):
			h := strings.TrimPrefix(name, redissink.HeaderFieldPrefix)
			r.Headers[h] = append(r.Headers[h], value)
		}
	}
	return r
}

// newSink returns a sink appending to srv under prefix, connected, closed
// at cleanup. configure, when set, changes its Config first.
func newSink(t testing.TB, srv *redistest.Server, configure func(*redissink.Config)) *redissink.Sink {
	t.Helper()
	s := openSink(t, srv, configure)
	waitfor.Condition(t, 15*time.Second, "the sink to reach Redis", func() bool { return s.Available() == nil })
	return s
}

// openSink is newSink without the wait.
func openSink(t testing.TB, srv *redistest.Server, configure func(*redissink.Config)) *redissink.Sink {
	t.Helper()
	cfg := redissink.Config{
		URL:          srv.URL(),
		StreamPrefix: prefix,
		Timeout:      5 * time.Second,
		Logger:       testLogger(t),
	}
	if configure != nil {
		configure(&cfg)
	}
	s, err := redissink.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func testLogger(t testing.TB) *slog.Logger {
	level := slog.LevelInfo
	if os.Getenv("TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level}))
}

// deliver delivers msgs within 20s and checks that there is one outcome per
// message.
func deliver(t *testing.T, s sinks.Sink, msgs []sinks.Message) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := s.Deliver(ctx, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("%d outcomes for %d messages", len(errs), len(msgs))
	}
	return errs
}
