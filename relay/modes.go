package relay

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/internal/buckets"
)

// mode is what a delivery mode decides; the engine calls it and never
// branches on the mode. Each mode is a file: unordered.go, ordered.go,
// partitioned.go; this file is their registry.
type mode interface {
	// claimers returns the claim loops the relay runs.
	claimers() []claimer
	// deliver sends one sink's share of a claimed batch: all at once
	// (delivery.all), or in waves that keep each key's order.
	deliver(ctx context.Context, d *delivery)
	// settleStatements returns the mode's settle statements.
	settleStatements() settleStatements
	// oldestClaimable returns what fills queryFloor's {oldest}: the
	// oldest available_at at or above @start of a row the mode's claims
	// may take (the claim floor's oldest visible row).
	oldestClaimable() string
	// fence returns the arguments of the settle statements' fence for the
	// outcomes items (nil when the mode has none).
	fence(items []outcome) pgx.StrictNamedArgs
	// settled learns that items were written down, or given up.
	settled(items []outcome)
	// run does the mode's own work until ctx ends, which happens once the
	// relay has settled every outcome.
	run(ctx context.Context)
	// countDue counts the rows due per sink with add, for the backlog
	// gauge, and refreshes the mode's own gauges. It reports whether the
	// oldest due times it passed are the ones to report: when a row may be
	// due by the table and still wait (behind its key), the table's oldest
	// due row is not.
	countDue(ctx context.Context, add func(sink string, due int64, oldest *time.Time)) (oldestKnown bool, err error)
}

// newMode returns the mode r's configuration names.
func newMode(r *Relay) mode {
	switch r.cfg.Mode {
	case outbox.ModeOrdered:
		return newOrdered(r)
	case outbox.ModePartitioned:
		return newPartitioned(r)
	}
	return newUnordered(r)
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
