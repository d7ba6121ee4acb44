package relay

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// failureLog gathers the failed deliveries of one sink over a second, so
// that the log has one line per kind of failure and second however the
// rows were batched, saying what happened to the rows (retry after a
// delay, or dead-lettered with a reason), to which ones (how many, their
// topics and id range) and why. A thousand rows failing alike make one
// line, not a thousand.
type failureLog struct {
	mu     sync.Mutex
	groups map[failureKey]*failureGroup
	order  []failureKey
}

// failureLogInterval is how often the gathered failures are logged.
const failureLogInterval = time.Second

type failureKey struct {
	kind   outcomeKind
	unsent bool // decided without sending (no sink, unreadable, past its attempts)
	reason string
	err    string
}

type failureGroup struct {
	n                  int
	topics             []string
	firstID, lastID    int64
	minDelay, maxDelay time.Duration
	// span is the trace context of the first failure's span, when traced.
	span trace.SpanContext
}

// maxLoggedTopics bounds the topics a failure line names, each cut to
// maxLoggedValueBytes.
const maxLoggedTopics = 3

func newFailureLog() *failureLog { return &failureLog{groups: map[failureKey]*failureGroup{}} }

// add records the outcome o of delivering m (a retry or a dead letter), or
// of deciding it without sending it when unsent.
//
// sc is the span of the delivery when tracing is on: the first valid one of
// a kind of failure is logged with it.
func (f *failureLog) add(m *sinks.Message, o rowOutcome, unsent bool, sc trace.SpanContext) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// The error may quote the row (a sink's error names its topic): the
	// line holds a bounded part of it, and so does the key.
	k := failureKey{kind: o.kind, unsent: unsent, reason: o.reason, err: clip(o.err, maxLoggedErrBytes)}
	g, ok := f.groups[k]
	if !ok {
		g = &failureGroup{firstID: m.ID, lastID: m.ID, minDelay: o.delay, maxDelay: o.delay}
		f.groups[k] = g
		f.order = append(f.order, k)
	}
	g.n++
	if !g.span.IsValid() {
		g.span = sc
	}
	g.firstID, g.lastID = min(g.firstID, m.ID), max(g.lastID, m.ID)
	g.minDelay, g.maxDelay = min(g.minDelay, o.delay), max(g.maxDelay, o.delay)
	if len(g.topics) < maxLoggedTopics {
		if topic := clip(m.Topic, maxLoggedValueBytes); !slices.Contains(g.topics, topic) {
			g.topics = append(g.topics, topic)
		}
	}
}

// logGroups writes one warning per kind of failure gathered since the last call,
// and starts gathering anew.
func (f *failureLog) logGroups(log *slog.Logger, sink string) {
	f.mu.Lock()
	groups, order := f.groups, f.order
	f.groups, f.order = map[failureKey]*failureGroup{}, nil
	f.mu.Unlock()
	for _, k := range order {
		g := groups[k]
		ids := fmt.Sprint(g.firstID)
		if g.lastID != g.firstID {
			ids = fmt.Sprintf("%d..%d", g.firstID, g.lastID)
		}
		// sink is a row's destination when it is not a configured sink.
		attrs := []any{"sink", clip(sink, maxLoggedValueBytes), "num_messages", g.n, "topics", strings.Join(g.topics, ","), "outbox_ids", ids}
		attrs = append(attrs, traceIDs(g.span)...)
		if k.kind == kindRetry {
			retry := g.minDelay.Round(time.Millisecond).String()
			if g.maxDelay.Round(time.Millisecond) != g.minDelay.Round(time.Millisecond) {
				retry += ".." + g.maxDelay.Round(time.Millisecond).String()
			}
			log.Warn("delivery failed; retrying", append(attrs, "retry_in", retry, "err", k.err)...)
			continue
		}
		msg := "delivery failed; dead-lettered"
		if k.unsent {
			msg = "dead-lettered without sending"
		}
		log.Warn(msg, append(attrs, "reason", k.reason, "err", k.err)...)
	}
}

// failureLogs holds a failureLog per sink, or per destination for rows
// whose destination is not a configured sink, and logs them.
type failureLogs struct {
	log *slog.Logger
	// configured are the sinks whose logs are kept once logged.
	configured map[string]sinks.Sink

	mu     sync.Mutex
	bySink map[string]*failureLog
}

func newFailureLogs(log *slog.Logger, configured map[string]sinks.Sink) *failureLogs {
	return &failureLogs{log: log, configured: configured, bySink: map[string]*failureLog{}}
}

// forSink returns the failure log forSink sink.
func (l *failureLogs) forSink(sink string) *failureLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, ok := l.bySink[sink]
	if !ok {
		f = newFailureLog()
		l.bySink[sink] = f
	}
	return f
}

// logLoop logs the failures gathered for each sink every failureLogInterval
// until ctx ends; Run logs the last ones after the deliveries end.
func (l *failureLogs) logLoop(ctx context.Context) {
	t := time.NewTicker(failureLogInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.logAll()
		}
	}
}

// logAll logs the failures gathered for each sink. The logs of
// destinations that are not configured sinks (row data) are dropped once
// logged, so that they cannot pile up.
func (l *failureLogs) logAll() {
	l.mu.Lock()
	logs := maps.Clone(l.bySink)
	for name := range l.bySink {
		if _, ok := l.configured[name]; !ok {
			delete(l.bySink, name)
		}
	}
	l.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(logs)) {
		logs[name].logGroups(l.log, name)
	}
}
