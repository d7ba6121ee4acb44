package nats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// EnsureStream creates the JetStream stream name, capturing every subject
// under the prefix (prefix + ">"), unless a stream of that name exists; an
// existing stream is left exactly as it is. It waits for the connection, so
// it blocks until NATS is reachable or ctx ends. It is meant for quick starts
// and demos (NATS_STREAM); production streams are the operator's to manage.
func (s *Sink) EnsureStream(ctx context.Context, name, prefix string) error {
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
		Duplicates: 2 * time.Minute,
	})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("create stream %s: %w", name, err)
	}
	s.log.Info("created JetStream stream", "stream", name, "subjects", prefix+">")
	return nil
}
