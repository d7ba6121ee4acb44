package relay

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"
)

// checkAutovacuum warns once, through log, when the server does not vacuum the hot table
// by itself: every delivered row leaves a dead tuple and dead index entries
// there, which the claims walk past until VACUUM removes them, so claims
// slow down and the table grows for as long as nobody vacuums it. The
// migrations tune the table's autovacuum; this catches the server-wide
// switch (autovacuum = off) and the table's own (autovacuum_enabled =
// false), which a DBA may have set for a bulk load and forgotten. stmt is
// queryAutovacuum, rendered.
func checkAutovacuum(ctx context.Context, db queryRower, stmt, schema string, log *slog.Logger) {
	var server, table bool
	if err := db.QueryRow(ctx, stmt, pgx.StrictNamedArgs{"schema_name": schema}).Scan(&server, &table); err != nil {
		if ctx.Err() == nil {
			log.Warn("check autovacuum", "err", err)
		}
		return
	}
	if server && table {
		return
	}
	switch {
	case !server:
		log.Warn("autovacuum is off on this PostgreSQL server: the outbox table's delivered rows stay behind as dead tuples, "+
			"claims slow down and the table grows until something vacuums it; set autovacuum = on, or run VACUUM on it every minute or so",
			"table", schema+".messages", "metric", "outbox_relay_hot_table_dead_tuples")
	default:
		log.Warn("autovacuum is disabled for the outbox table (autovacuum_enabled = false): its delivered rows stay behind as dead tuples, "+
			"claims slow down and the table grows until something vacuums it; reset it with ALTER TABLE … RESET (autovacuum_enabled)",
			"table", schema+".messages", "metric", "outbox_relay_hot_table_dead_tuples")
	}
}
