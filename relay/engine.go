package relay

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/relay/internal/floor"
	"github.com/outbox-relay/outbox-relay/relay/internal/keychain"
	"github.com/outbox-relay/outbox-relay/relay/internal/liveness"
)

// engine is what a mode works with: the relay's configuration, its
// database, log and metrics, the claim runner that runs the mode's claim
// statements, the claim floor every claim is bounded by, the liveness
// monitor of the loops the mode runs, and the heartbeat the bucket owner
// records in its rounds. Modes receive it, never the *Relay.
type engine struct {
	cfg     *Config
	pool    *pgxpool.Pool
	log     *slog.Logger
	metrics *Metrics
	claims  *claimRunner
	floor   *floor.State
	live    *liveness.Monitor
	// chains are the links of the keyed rows in flight, for the modes that
	// keep a key's order (keyorder.go).
	chains *keychain.Chains
	// heartbeat records, through db, that the relay is alive (registry).
	heartbeat func(ctx context.Context, db queryRower) error
	// backlog is queryMessagesBacklog, rendered (countDueRows).
	backlog string
}

// idFloorArgs adds to args what ofKey's lookups take: the id floor, the
// transactions it passed and the smallest row ids they may hold (idFloor),
// and returns args.
func (e *engine) idFloorArgs(args pgx.StrictNamedArgs) pgx.StrictNamedArgs {
	args["id_floor"], args["passed_writers"], args["passed_ids"] = e.floor.IDs()
	return args
}

// runChainedClaim runs stmt, a claim of a keyed mode that may name rows of
// this relay's (after) and takes the keys of the rows it holds
// (@keys_in_flight, keysInFlight): between the chains' Begin and its end,
// so that the links it may name, settled meanwhile, are kept until its
// rows are linked into their chains (chainKeys).
func (e *engine) runChainedClaim(ctx context.Context, stmt string, args pgx.StrictNamedArgs, req claimRequest, what string) ([]claimedRow, []heldKey, error) {
	end := e.chains.Begin() // and the links settled before are forgotten
	defer end()
	args["keys_in_flight"] = keysInFlight(e.chains.Keys())
	batch, held, err := e.claims.runClaim(ctx, stmt, args, req, what)
	e.chainKeys(batch)
	return batch, held, err
}

// chainKeys links the keyed rows of batch (in id order) into their keys'
// chains (relay/internal/keychain): each follows its key's previous row in
// the batch, or the row of this relay's that its claim named (after).
func (e *engine) chainKeys(batch []claimedRow) {
	var rows []keychain.Row
	var at []int
	for i := range batch {
		if batch[i].keyed {
			rows = append(rows, keychain.Row{ID: batch[i].ID, Key: batch[i].Key, After: batch[i].after})
			at = append(at, i)
		}
	}
	if len(rows) == 0 {
		return
	}
	self, prev := e.chains.Claimed(rows, time.Now().Add(e.cfg.Lease))
	for j, i := range at {
		batch[i].self, batch[i].prev = self[j], prev[j]
	}
}

// countDueRows counts the due rows per sink (queryMessagesBacklog) into r,
// for the modes where every due row may be claimed.
func (e *engine) countDueRows(ctx context.Context, r *gaugeReadings) error {
	rows, err := e.pool.Query(ctx, e.backlog, planPerExecution, pgx.StrictNamedArgs{"default_sink": e.cfg.DefaultSink, "cap": gaugeCountCap, "floor": e.floor.Current()})
	if err != nil {
		return fmt.Errorf("query backlog: %w", err)
	}
	var sink string
	var due int64
	_, err = pgx.ForEachRow(rows, []any{&sink, &due}, func() error {
		r.addDue(sink, due, nil)
		return nil
	})
	if err != nil {
		return fmt.Errorf("query backlog: %w", err)
	}
	return nil
}

// streamPause is how long a claim loop over the whole table (unordered
// mode's first loop, ordered mode's loop for rows without a key) waits
// after an empty claim while a stream flows (claimLoops.eager): a tenth of
// PollInterval, the pace of claims that find rows, until streamPauses
// such pauses have passed since a claim of its rows last found some. A
// steady stream's claims find nothing now and then (two loops claimed just
// after each other); waiting the whole PollInterval (50 ms by default)
// then held the rows that committed next, which set the commit-to-ack p99
// of a steady 10k rows/s. After that the loop backs off as before: a
// stream whose rows come further apart costs a few more claims a row, not
// ten every PollInterval; one whose rows come closer (50 rows/s) is
// claimed every pause, as a busy one is (docs/benchmarks.md: 2.8 times
// the claims at 50 rows/s, and a p50 of 4.5 ms against 18).
func (e *engine) streamPause() time.Duration { return e.cfg.PollInterval / 10 }

// streamPauses is how many streamPause pauses a stream's lull is paced
// with (claimer.eagerPauses): three, 15-20 ms at the default
// RELAY_POLL_INTERVAL.
const streamPauses = 3
