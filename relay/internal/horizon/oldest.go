package horizon

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Holder is a transaction or a replication slot holding the xmin horizon,
// with what an operator needs to end it.
type Holder struct {
	// Kind is HolderSession, HolderPrepared or HolderReplication.
	Kind string `db:"holder"`
	// PID is the backend's (a slot's active walsender's); nil for a
	// prepared transaction and an inactive slot.
	PID *int32 `db:"pid"`
	// Name is a prepared transaction's gid or a slot's name.
	Name string `db:"name"`
	// User, ApplicationName and State are the session's (a prepared
	// transaction's owner); empty where PostgreSQL does not say.
	User            string `db:"usename"`
	ApplicationName string `db:"application_name"`
	State           string `db:"state"`
	// AgeSeconds is the time since its transaction started (since its
	// PREPARE for a prepared one), at least 0; nil where PostgreSQL does
	// not say (a slot, a walsender, or another role's session without
	// pg_read_all_stats).
	AgeSeconds *float64 `db:"age_seconds"`
	// AgeTransactions is the age of its xmin or transaction id.
	AgeTransactions int64 `db:"age_xids"`
}

// Oldest is what ReadOldest reads: the oldest holders of the horizon, and
// whether the reader could see when every one started.
type Oldest struct {
	// Holders are the oldest few, oldest xmin first (then the longest
	// held).
	Holders []Holder
	// SeesAllSessions is false when the reading role lacks
	// pg_read_all_stats: PostgreSQL then hides when other roles'
	// transactions started, their state and their backend type.
	SeesAllSessions bool
}

// ReadOldest reads the n oldest holders of the horizon of db's database,
// in one round trip (QueueOldest).
func ReadOldest(ctx context.Context, db DB, n int) (Oldest, error) {
	var o Oldest
	b := &pgx.Batch{}
	QueueOldest(b, n, &o)
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return Oldest{}, fmt.Errorf("list the oldest holders: %w", err)
	}
	return o, nil
}

// QueueOldest queues on b the statements that read the n oldest holders
// of the horizon (queryHorizonHolders) and whether the reader sees every
// session (queryReadAllStats), for a caller that reads more in the same
// round trip: once b's results are read (BatchResults.Close), into holds
// them, Holders never nil.
func QueueOldest(b *pgx.Batch, n int, into *Oldest) {
	b.Queue(queryReadAllStats).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&into.SeesAllSessions); err != nil {
			return fmt.Errorf("read whether every session shows: %w", err)
		}
		return nil
	})
	b.Queue(queryHorizonHolders, pgx.StrictNamedArgs{"limit": n}).Query(func(rows pgx.Rows) error {
		holders, err := pgx.CollectRows(rows, pgx.RowToStructByName[Holder])
		if err != nil {
			return fmt.Errorf("read the xmin horizon: %w", err)
		}
		for _, h := range holders {
			if h.AgeSeconds != nil {
				*h.AgeSeconds = max(*h.AgeSeconds, 0)
			}
		}
		into.Holders = holders
		return nil
	})
}
