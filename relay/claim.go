package relay

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// claimed is a row this relay leased, with what the claim learned about it.
type claimed struct {
	sinks.Message
	// sink is where the row goes: its destination, or the default sink.
	sink string
	// duplicate is set when the row's idempotency key was already delivered.
	duplicate bool
	// seq is the row's claim_seq after this claim: its settle must find it.
	seq int32
	// rescued is set when the row's previous lease expired unsettled.
	rescued bool
}

// claim leases up to limit due rows whose sink is not in exclude and returns
// them in insert order.
func (r *Relay) claim(ctx context.Context, limit int, exclude []string) ([]claimed, error) {
	start := time.Now()
	rows, err := r.pool.Query(ctx, r.q.claim, planPerExecution, r.cfg.ID, r.cfg.DefaultSink, exclude, limit, r.cfg.Lease)
	if err != nil {
		return nil, fmt.Errorf("claim batch: %w", err)
	}
	batch := make([]claimed, 0, limit)
	rescued := 0
	for rows.Next() {
		var (
			c                claimed
			key, destination *string
			headers          []byte
		)
		err := rows.Scan(&c.ID, &c.Topic, &c.Payload, &key, &headers, &c.IdempotencyKey, &destination,
			&c.CreatedAt, &c.Attempt, &c.seq, &c.rescued, &c.duplicate)
		if err == nil {
			c.Headers, err = parseHeaders(headers)
		}
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("claim batch: read row: %w", err)
		}
		if key != nil {
			c.Key = *key
		}
		c.sink = r.cfg.DefaultSink
		if destination != nil {
			c.Destination = *destination
			c.sink = *destination
			if _, ok := r.cfg.Sinks[c.sink]; !ok {
				c.sink = unknownSink
			}
		}
		if c.rescued {
			rescued++
		}
		batch = append(batch, c)
	}
	if err := rows.Err(); err != nil {
		// The claim may have committed before the connection failed; rows
		// leased then come back when the lease expires.
		return nil, fmt.Errorf("claim batch: %w", err)
	}
	r.metrics.ClaimDuration.Observe(time.Since(start).Seconds())
	r.metrics.ClaimRows.Observe(float64(len(batch)))
	if rescued > 0 {
		r.metrics.LeaseRescues.Add(float64(rescued))
		r.log.Warn("claimed rows whose lease had expired; another relay (or this one) stopped before settling them",
			"num_rescued", rescued)
	}
	slices.SortFunc(batch, func(a, b claimed) int { return cmp.Compare(a.ID, b.ID) })
	return batch, nil
}
