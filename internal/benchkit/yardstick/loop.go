package main

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// tally is what the workers of a run did together.
type tally struct {
	delivered atomic.Int64 // rows archived
	claims    atomic.Int64 // claim statements run, empty ones included
}

// worker is one claim loop: claim, publish, await the acks, archive.
type worker struct {
	name  string // its lease owner, leased_by
	conn  *pgxpool.Conn
	js    jetstream.JetStream
	cfg   config
	lat   *latencies
	tally *tally
}

// row is a claimed row.
type row struct {
	id      int64
	topic   string
	payload []byte
	headers map[string]string
}

// run loops until a claim comes back empty (untilEmpty: a backlog) or
// until the run's rows are all delivered (a steady stream). Any failure
// ends it: the yardstick retries nothing.
func (w *worker) run(ctx context.Context, untilEmpty bool) error {
	batch := make([]row, 0, w.cfg.Batch)
	ids := make([]int64, 0, w.cfg.Batch)
	futures := make([]jetstream.PubAckFuture, 0, w.cfg.Batch)
	for untilEmpty || w.tally.delivered.Load() < int64(w.cfg.N) {
		var err error
		if batch, err = w.claim(ctx, batch[:0]); err != nil {
			return err
		}
		if len(batch) == 0 {
			if untilEmpty {
				return nil
			}
			if err := sleepUntil(ctx, time.Now().Add(w.cfg.Poll)); err != nil {
				return err
			}
			continue
		}
		if err := w.publish(ctx, batch, futures[:0]); err != nil {
			return err
		}
		if err := w.archive(ctx, batch, ids[:0]); err != nil {
			return err
		}
		w.tally.delivered.Add(int64(len(batch)))
	}
	return nil
}

// claim leases up to a batch of due rows and appends them to batch.
func (w *worker) claim(ctx context.Context, batch []row) ([]row, error) {
	w.tally.claims.Add(1)
	rows, err := w.conn.Query(ctx, queryOutboxClaim, pgx.NamedArgs{"worker": w.name, "lease": w.cfg.Lease, "batch": w.cfg.Batch})
	if err != nil {
		return batch, fmt.Errorf("claim: %w", err)
	}
	var r row
	_, err = pgx.ForEachRow(rows, []any{&r.id, &r.topic, &r.payload, &r.headers}, func() error {
		batch = append(batch, r)
		r = row{}
		return nil
	})
	if err != nil {
		return batch, fmt.Errorf("claim: %w", err)
	}
	return batch, nil
}

// publish sends every row of batch to JetStream asynchronously, its id as
// Nats-Msg-Id, and waits for every ack. A failed publish ends the run.
func (w *worker) publish(ctx context.Context, batch []row, futures []jetstream.PubAckFuture) error {
	for _, r := range batch {
		m := &nats.Msg{Subject: r.topic, Data: r.payload, Header: make(nats.Header, len(r.headers)+1)}
		for k, v := range r.headers {
			m.Header[k] = []string{v}
		}
		f, err := w.js.PublishMsgAsync(m, jetstream.WithMsgID(strconv.FormatInt(r.id, 10)))
		if err != nil {
			return fmt.Errorf("publish row %d: %w", r.id, err)
		}
		futures = append(futures, f)
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
			w.lat.acked(batch[i].id, time.Now())
		case err := <-f.Err():
			return fmt.Errorf("publish row %d: %w", batch[i].id, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// archive moves the rows of batch from the hot table to the archive in one
// statement, and fails when the worker no longer leased all of them.
func (w *worker) archive(ctx context.Context, batch []row, ids []int64) error {
	for _, r := range batch {
		ids = append(ids, r.id)
	}
	tag, err := w.conn.Exec(ctx, queryOutboxArchive, pgx.NamedArgs{"ids": ids, "worker": w.name})
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	if tag.RowsAffected() != int64(len(ids)) {
		return fmt.Errorf("archive: %d of %d rows still leased by %s", tag.RowsAffected(), len(ids), w.name)
	}
	return nil
}
