package relay

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/internal/buckets"
)

// deliveryMode is what a delivery deliveryMode decides; the engine calls it and never
// branches on the deliveryMode. Each deliveryMode is a file: unordered.go, ordered.go,
// partitioned.go; this file is their registry.
type deliveryMode interface {
	// claimers returns the claim loops the relay runs.
	claimers() []claimer
	// deliverBatch sends one sink's share of a claimed batch: all at once
	// (sinkDelivery.sendAll), or in waves that keep each key's order.
	deliverBatch(ctx context.Context, d *sinkDelivery)
	// settleStatements returns the mode's settle statements.
	settleStatements() settleStatements
	// oldestClaimable returns what fills queryFloor's {oldest}: the
	// oldest available_at at or above @start of a row the mode's claims
	// may take (the claim floor's oldest visible row).
	oldestClaimable() string
	// fenceArgs returns the arguments of the settle statements' fenceArgs for the
	// outcomes items (nil when the mode has none).
	fenceArgs(items []rowOutcome) pgx.StrictNamedArgs
	// afterSettle learns that items were written down, or given up.
	afterSettle(items []rowOutcome)
	// runMode does the mode's own work until ctx ends, which happens once the
	// relay has settled every outcome.
	runMode(ctx context.Context)
	// countDue counts the rows due per sink into r (gaugeReadings.addDue),
	// for the backlog gauge, and the mode's own gauges' counts. It sets
	// r.OldestKnown when the oldest due times it passed are the ones to
	// report: when a row may be due by the table and still wait (behind
	// its key), the table's oldest due row is not.
	countDue(ctx context.Context, r *gaugeReadings) error
}

// newMode returns the mode e's configuration names.
func newMode(e *engine) deliveryMode {
	switch e.cfg.Mode {
	case outbox.ModeOrdered:
		return newOrdered(e)
	case outbox.ModePartitioned:
		return newPartitioned(e)
	}
	return newUnordered(e)
}

// switchStatements are what a switch of schema from one mode to another
// runs, with producers held out, once the new mode is recorded: every row
// is a candidate again when entering ordered mode (queryHeadsReset), and
// nobody owns a bucket outside partitioned mode (epochs go on).
func switchStatements(schema string, from, to outbox.Mode) []string {
	var s []string
	if to == outbox.ModeOrdered {
		s = append(s, render(queryHeadsReset, schema, nil))
	}
	if from == outbox.ModePartitioned {
		s = append(s, buckets.ResetStatement(outbox.QuoteSchema(schema)))
	}
	return s
}
