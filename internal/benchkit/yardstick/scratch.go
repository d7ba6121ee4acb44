package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
)

// The stream the yardstick publishes to, and the subject of its rows.
const (
	streamName = "YARDSTICK"
	topic      = "yardstick.events"
)

// errNotScratch is returned when a table or the stream a run would reset
// exists without the yardstick's marker.
var errNotScratch = errors.New("not made by the yardstick")

// resetTables gives the run empty tables in the pool's schema: it drops
// them when they carry the marker, refuses when either exists without it,
// and creates both with it.
func resetTables(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	var current *string
	if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&current); err != nil {
		return fmt.Errorf("look up schema: %w", err)
	}
	if current == nil {
		return fmt.Errorf("schema %s does not exist: create it, or choose another -schema", schema)
	}
	rows, err := pool.Query(ctx, queryTablesLookup)
	if err != nil {
		return fmt.Errorf("look up tables: %w", err)
	}
	var name, comment string
	_, err = pgx.ForEachRow(rows, []any{&name, &comment}, func() error {
		if comment != marker {
			return fmt.Errorf("table %s exists and is %w (it lacks the yardstick's comment), and the yardstick drops "+
				"and recreates its tables on every run: choose another -schema, or, when it is another loop's "+
				"scratch table (../shared/refloop makes the same names), drop it yourself: DROP TABLE %s, %s",
				pgx.Identifier{schema, name}.Sanitize(), errNotScratch,
				pgx.Identifier{schema, "outbox"}.Sanitize(), pgx.Identifier{schema, "outbox_archive"}.Sanitize())
		}
		return nil
	})
	if err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, queryTablesDrop); err != nil {
		return fmt.Errorf("drop tables: %w", err)
	}
	if _, err := pool.Exec(ctx, queryTablesCreate); err != nil {
		return fmt.Errorf("create tables: %w", err)
	}
	return nil
}

// resetStream gives the run an empty stream: it deletes the stream when
// its description is the marker, refuses when it exists without it, and
// creates it with the marker.
func resetStream(ctx context.Context, js jetstream.JetStream) error {
	st, err := js.Stream(ctx, streamName)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
	case err != nil:
		return fmt.Errorf("look up stream %s: %w", streamName, err)
	case st.CachedInfo().Config.Description != marker:
		return fmt.Errorf("stream %s exists and is %w: the yardstick deletes its stream on every run, so delete or rename that one yourself", streamName, errNotScratch)
	default:
		if err := js.DeleteStream(ctx, streamName); err != nil {
			return fmt.Errorf("delete stream: %w", err)
		}
	}
	cfg := jetstream.StreamConfig{
		Name: streamName, Description: marker, Subjects: []string{"yardstick.>"},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, Replicas: 1,
	}
	// Just after the delete the server may still be removing the old
	// stream's files and refuse to create the new store: try a few times.
	for attempt := 1; ; attempt++ {
		_, err = js.CreateStream(ctx, cfg)
		if err == nil || attempt == 5 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("create stream: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("create stream: %w", err)
	}
	return nil
}

// streamMessages is the number of messages in the stream.
func streamMessages(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	st, err := js.Stream(ctx, streamName)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}
