package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/relay/admin"
)

// The operator's commands (status.go, dead.go, replay.go, cancel.go) need
// DATABASE_URL (and RELAY_SCHEMA), no sink, and work whether relays run or
// not; the work is done by package relay/admin.

// adminPoolSize covers an admin command's single transaction.
const adminPoolSize = 2

// adminOps is the operator API on the configured schema, with the pool it
// runs on.
type adminOps struct {
	*admin.Admin
	pool *pgxpool.Pool
}

func (o adminOps) close() { o.pool.Close() }

// openAdmin reads the configuration and connects to a schema the relay's
// migrations created.
func openAdmin(ctx context.Context, inv *Invocation) (config, adminOps, error) {
	c, err := loadConfig(inv.Environ)
	if err != nil {
		return c, adminOps{}, err
	}
	if err := c.requireDatabase(); err != nil {
		return c, adminOps{}, err
	}
	pool, err := openPool(ctx, c.DatabaseURL, adminPoolSize)
	if err != nil {
		return c, adminOps{}, err
	}
	if err := checkSchema(ctx, pool, c.Schema); err != nil {
		pool.Close()
		return c, adminOps{}, err
	}
	a, err := admin.New(pool, c.Schema)
	if err != nil {
		pool.Close()
		return c, adminOps{}, err
	}
	return c, adminOps{Admin: a, pool: pool}, nil
}

// defaultSinkName is how status names the destination of rows without
// one: RELAY_SINK, the only configured sink, or admin.DefaultSinkLabel.
func defaultSinkName(c *config) string {
	if name := c.defaultSink(); name != "" {
		return name
	}
	return admin.DefaultSinkLabel
}

// noFilterAsUsage turns admin.ErrNoFilter into a usage error with advice
// (saying so when the --topic given matches every topic), and an unknown
// --reason into a usage error.
func noFilterAsUsage(err error, topic, advice string) error {
	switch {
	case errors.Is(err, admin.ErrNoFilter) && admin.TopicMatchesAll(topic):
		return usageError{fmt.Errorf("--topic %q matches every topic, so it is no filter: %s", topic, advice)}
	case errors.Is(err, admin.ErrNoFilter):
		return usageError{fmt.Errorf("no filter given: %s", advice)}
	case errors.Is(err, admin.ErrUnknownReason):
		return usageError{fmt.Errorf("--reason: %w", err)}
	}
	return err
}
