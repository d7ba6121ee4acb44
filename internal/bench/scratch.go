package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// ScratchMarker is the comment on a schema, and the description of a
// stream, that the benchmark created: it drops and recreates only what
// carries it, so that it never destroys anything it did not make.
const ScratchMarker = "outbox-relay bench scratch: dropped and recreated by every bench run"

// ErrNotScratch is returned when the schema or stream a run would reset
// exists and was not made by the benchmark.
var ErrNotScratch = errors.New("not made by outbox-relay bench")

// resetScratch resets o's scratch schema, in the mode of o.Relay
// (applyMode), and the stream.
func resetScratch(ctx context.Context, pool *pgxpool.Pool, o Options) error {
	if err := resetSchema(ctx, pool, o.Schema); err != nil {
		return err
	}
	if err := applyMode(ctx, pool, o); err != nil {
		return err
	}
	return resetStream(ctx, o.NatsURL)
}

// resetSchema gives the run an empty, migrated schema: it drops schema
// when it carries ScratchMarker, refuses when it exists without it, and
// creates it with the marker.
func resetSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	q := outbox.QuoteSchema(schema)
	var exists bool
	var comment *string
	err := pool.QueryRow(ctx, `
SELECT true, obj_description(n.oid, 'pg_namespace')
  FROM pg_catalog.pg_namespace AS n WHERE n.nspname = $1`, schema).Scan(&exists, &comment)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("look up schema %s: %w", schema, err)
	}
	if exists {
		if comment == nil || *comment != ScratchMarker {
			return fmt.Errorf("schema %s exists and is %w (its comment is not the benchmark's marker): choose another -schema; the benchmark drops its schema", schema, ErrNotScratch)
		}
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+q+" CASCADE"); err != nil {
			return fmt.Errorf("drop bench schema: %w", err)
		}
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+q); err != nil {
		return fmt.Errorf("create bench schema: %w", err)
	}
	if _, err := pool.Exec(ctx, "COMMENT ON SCHEMA "+q+" IS '"+ScratchMarker+"'"); err != nil {
		return fmt.Errorf("mark bench schema: %w", err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	_, err = migrations.Apply(ctx, conn.Conn(), schema)
	return err
}

// resetStream gives the run an empty stream Stream: it deletes the stream
// when its description is ScratchMarker, refuses when it exists without it,
// and creates it with the marker.
func resetStream(ctx context.Context, url string) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return fmt.Errorf("connect to NATS: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	st, err := js.Stream(ctx, Stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
	case err != nil:
		return fmt.Errorf("look up stream %s: %w", Stream, err)
	case st.CachedInfo().Config.Description != ScratchMarker:
		return fmt.Errorf("stream %s exists and is %w: the benchmark deletes its stream, so delete or rename that one yourself", Stream, ErrNotScratch)
	default:
		if err := js.DeleteStream(ctx, Stream); err != nil {
			return fmt.Errorf("delete stream: %w", err)
		}
	}
	cfg := jetstream.StreamConfig{
		Name: Stream, Description: ScratchMarker, Subjects: []string{"bench.outbox.>"},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, Replicas: 1,
	}
	// Just after the delete, the server may still be removing the old
	// stream's files, and refuses to create its store (CI met it once, in
	// an in-process server): try again a few times.
	for attempt := 1; ; attempt++ {
		_, err = js.CreateStream(ctx, cfg)
		if err == nil {
			return nil
		}
		if attempt == storeRetries || !storeNotCreated(err) {
			return fmt.Errorf("create stream: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("create stream: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// storeRetries is how many times resetStream tries to create the stream
// while the server cannot create its store, 200 ms apart: 10 s. Five
// tries (1 s) were not enough on a loaded CI machine (load 5-8, the whole
// suite running beside; benchcmp's TestManyOutboxes, 2026-11-29).
const storeRetries = 50

// storeNotCreated reports whether err is the server's failure to create a
// stream's store (JetStream error 10049, "error creating store for
// stream").
func storeNotCreated(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10049 && strings.Contains(apiErr.Description, "error creating store")
}
