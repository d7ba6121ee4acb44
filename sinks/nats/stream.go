package nats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// EnsureStream creates the JetStream stream name, capturing every subject
// under the prefix (prefix + ">") with the given duplicate window, unless a
// stream of that name exists; an existing stream is left exactly as it is. It waits for the connection, so
// it blocks until NATS is reachable or ctx ends. It is meant for quick starts
// and demos (NATS_STREAM); production streams are the operator's to manage.
func (s *Sink) EnsureStream(ctx context.Context, name, prefix string, duplicates time.Duration) error {
	if s.js == nil {
		return errors.New("ensure stream: core NATS (NATS_JETSTREAM=false) has no streams")
	}
	if prefix == "" {
		return errors.New("ensure stream: a subject prefix is required, so that the stream does not capture every subject")
	}
	for !s.nc.IsConnected() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("ensure stream %s: %w", name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	_, err := s.js.Stream(ctx, name)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("look up stream %s: %w", name, err)
	}
	_, err = s.js.CreateStream(ctx, jetstream.StreamConfig{
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
	if s.js == nil {
		return StreamCheck{}, errors.New("check stream: core NATS has no streams")
	}
	for !s.nc.IsConnected() {
		select {
		case <-ctx.Done():
			return StreamCheck{}, fmt.Errorf("check stream for %s: %w", subject, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	name, err := s.js.StreamNameBySubject(ctx, subject)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return StreamCheck{}, nil
	}
	if err != nil {
		return StreamCheck{}, fmt.Errorf("find the stream for %s: %w", subject, err)
	}
	st, err := s.js.Stream(ctx, name)
	if err != nil {
		return StreamCheck{}, fmt.Errorf("read stream %s: %w", name, err)
	}
	return StreamCheck{Stream: name, Duplicates: st.CachedInfo().Config.Duplicates}, nil
}
