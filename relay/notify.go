package relay

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/relay/internal/listener"
)

// Listener is one database's listening connection for RELAY_NOTIFY
// (relay/internal/listener): relays on several schemas of one database
// share one (Config.Listener); a relay without one runs its own.
type Listener = listener.Listener

// NewListener returns a listener on pool's database, which logs to log.
// Run it with Run.
func NewListener(pool *pgxpool.Pool, log *slog.Logger) *Listener {
	return listener.New(listener.Config{Pool: pool, Logger: log, Redact: redactConnError})
}
