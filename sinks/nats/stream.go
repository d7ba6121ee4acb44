package nats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Start-up problems CheckStartup reports (outbox_relay_sink_problem).
const (
	ProblemNoStream         = "no_stream"
	ProblemShortDedupWindow = "short_dedup_window"
)

// minStreamDuplicates is the shortest duplicate window of a stream the sink
// creates: JetStream's default.
const minStreamDuplicates = 2 * time.Minute

// CheckStartup waits for the connection, creates Config.Stream when it is
// set and missing, and checks that a stream captures the relay's subjects
// (SubjectPrefix + ">") with a duplicate window of at least
// Config.DuplicateWindow. Without a prefix it cannot tell which stream
// captures the topics and reports nothing. Core NATS has nothing to check.
func (s *Sink) CheckStartup(ctx context.Context) ([]sinks.Problem, error) {
	if !s.cfg.JetStream {
		return nil, nil
	}
	if s.cfg.Stream != "" {
		window := max(minStreamDuplicates, s.cfg.DuplicateWindow)
		if err := s.EnsureStream(ctx, s.cfg.Stream, s.cfg.SubjectPrefix, window); err != nil {
			return nil, err
		}
	}
	if s.cfg.SubjectPrefix == "" {
		s.log.Info("NATS_SUBJECT_PREFIX is empty, so the start-up check cannot tell which stream captures the topics; publishes to a subject no stream captures are retried and logged")
		return nil, nil
	}
	subject := s.cfg.SubjectPrefix + ">"
	check, err := s.CheckStream(ctx, subject)
	if err != nil {
		return nil, err
	}
	if check.Stream == "" {
		return []sinks.Problem{{
			Code:    ProblemNoStream,
			Message: "no JetStream stream captures the relay's subjects: every publish will fail and be retried until one does",
			Attrs:   []any{"subject", subject},
		}}, nil
	}
	if need := s.cfg.DuplicateWindow; check.Duplicates < need {
		return []sinks.Problem{{
			Code: ProblemShortDedupWindow,
			Message: "the stream's duplicate window is shorter than RELAY_LEASE + RELAY_BACKOFF_MAX: a message re-sent after a lease expiry or a long retry delay may be stored twice; " +
				"raise the stream's duplicate window or lower RELAY_BACKOFF_MAX, and let consumers dedupe by Nats-Msg-Id",
			Attrs: []any{"stream", check.Stream, "duplicate_window", check.Duplicates, "lease_plus_backoff_max", need},
		}}, nil
	}
	s.log.Info("JetStream stream captures the relay's subjects", "stream", check.Stream, "subject", subject, "duplicate_window", check.Duplicates)
	return nil, nil
}

// EnsureStream creates the JetStream stream name, capturing every subject
// under the prefix (prefix + ">") with the given duplicate window, unless a
// stream of that name exists; an existing stream is left exactly as it is. It waits for the connection, so
// it blocks until NATS is reachable or ctx ends. It is meant for quick starts
// and demos (NATS_STREAM); production streams are the operator's to manage.
func (s *Sink) EnsureStream(ctx context.Context, name, prefix string, duplicates time.Duration) error {
	if !s.cfg.JetStream {
		return errors.New("ensure stream: core NATS (NATS_JETSTREAM=false) has no streams")
	}
	if prefix == "" {
		return errors.New("ensure stream: a subject prefix is required, so that the stream does not capture every subject")
	}
	c := s.conn.Load()
	for !c.nc.IsConnected() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("ensure stream %s: %w", name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	_, err := c.js.Stream(ctx, name)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("look up stream %s: %w", name, err)
	}
	_, err = c.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       name,
		Subjects:   []string{prefix + ">"},
		Storage:    jetstream.FileStorage,
		Duplicates: duplicates,
	})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("create stream %s: %w", name, err)
	}
	s.log.Info("created JetStream stream", "stream", name, "subjects", prefix+">", "duplicate_window", duplicates)
	return nil
}

// StreamCheck is what CheckStream found about the stream that captures a
// subject.
type StreamCheck struct {
	// Stream is the capturing stream's name; empty when none captures it.
	Stream string
	// Duplicates is that stream's duplicate window: a message re-sent later
	// than this after the first copy is stored twice.
	Duplicates time.Duration
}

// CheckStream looks up the stream capturing subject (a subject or a
// wildcard such as "events.>") and its duplicate window. It waits for the
// connection, so it blocks until NATS is reachable or ctx ends.
func (s *Sink) CheckStream(ctx context.Context, subject string) (StreamCheck, error) {
	if !s.cfg.JetStream {
		return StreamCheck{}, errors.New("check stream: core NATS has no streams")
	}
	c := s.conn.Load()
	for !c.nc.IsConnected() {
		select {
		case <-ctx.Done():
			return StreamCheck{}, fmt.Errorf("check stream for %s: %w", subject, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	name, err := c.js.StreamNameBySubject(ctx, subject)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return StreamCheck{}, nil
	}
	if err != nil {
		return StreamCheck{}, fmt.Errorf("find the stream for %s: %w", subject, err)
	}
	st, err := c.js.Stream(ctx, name)
	if err != nil {
		return StreamCheck{}, fmt.Errorf("read stream %s: %w", name, err)
	}
	return StreamCheck{Stream: name, Duplicates: st.CachedInfo().Config.Duplicates}, nil
}
