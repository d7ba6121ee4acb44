package relay

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// failureLog gathers the failed deliveries of one delivery, so that the log
// has one line per kind of failure, saying what happened to the rows (retry
// after a delay, or dead-lettered with a reason), to which ones (how many,
// their topics and id range) and why.
type failureLog struct {
	groups map[failureKey]*failureGroup
	order  []failureKey
}

type failureKey struct {
	kind   outcomeKind
	reason string
	err    string
}

type failureGroup struct {
	n                  int
	topics             []string
	firstID, lastID    int64
	minDelay, maxDelay time.Duration
}

// maxLoggedTopics bounds the topics a failure line names.
const maxLoggedTopics = 3

func newFailureLog() *failureLog { return &failureLog{groups: map[failureKey]*failureGroup{}} }

// add records the outcome o of delivering m (a retry or a dead letter).
func (f *failureLog) add(m *sinks.Message, o outcome) {
	k := failureKey{kind: o.kind, reason: o.reason, err: o.err}
	g, ok := f.groups[k]
	if !ok {
		g = &failureGroup{firstID: m.ID, lastID: m.ID, minDelay: o.delay, maxDelay: o.delay}
		f.groups[k] = g
		f.order = append(f.order, k)
	}
	g.n++
	g.firstID, g.lastID = min(g.firstID, m.ID), max(g.lastID, m.ID)
	g.minDelay, g.maxDelay = min(g.minDelay, o.delay), max(g.maxDelay, o.delay)
	if len(g.topics) < maxLoggedTopics && !slices.Contains(g.topics, m.Topic) {
		g.topics = append(g.topics, m.Topic)
	}
}

// log writes one warning per kind of failure.
func (f *failureLog) log(log *slog.Logger, sink string) {
	for _, k := range f.order {
		g := f.groups[k]
		ids := fmt.Sprint(g.firstID)
		if g.lastID != g.firstID {
			ids = fmt.Sprintf("%d..%d", g.firstID, g.lastID)
		}
		attrs := []any{"sink", sink, "num_messages", g.n, "topics", strings.Join(g.topics, ","), "outbox_ids", ids}
		if k.kind == kindRetry {
			retry := g.minDelay.Round(time.Millisecond).String()
			if g.maxDelay.Round(time.Millisecond) != g.minDelay.Round(time.Millisecond) {
				retry += ".." + g.maxDelay.Round(time.Millisecond).String()
			}
			log.Warn("delivery failed; retrying", append(attrs, "retry_in", retry, "err", k.err)...)
			continue
		}
		log.Warn("delivery failed; dead-lettered", append(attrs, "reason", k.reason, "err", k.err)...)
	}
}
