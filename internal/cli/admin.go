package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/outbox-relay/outbox-relay/relay/admin"
)

// The operator's commands (status.go, dead.go, replay.go, cancel.go) need
// the database (DATABASE_URL, or RELAY_TENANTS_FILE's), no sink, and work
// whether relays run or not; the work is done by package relay/admin.
// --tenant and --schema pick the outbox (target.go).

// adminPoolSize covers an admin command's single transaction.
const adminPoolSize = 2

// adminOps is the operator API on one outbox, with the pool it runs on.
type adminOps struct {
	*admin.Admin
	outbox outboxRef
	pools  *adminPools
}

func (o adminOps) close() { o.pools.close() }

// openAdmin reads the configuration and connects to the one outbox the
// flags pick (resolveOutboxes), whose schema the relay's migrations
// created. When the configuration names several outboxes and the flags
// pick none, it refuses with a usage error that lists them.
func openAdmin(ctx context.Context, inv *Invocation, f outboxFlags) (config, adminOps, error) {
	c, err := loadConfig(inv.Environ)
	if err != nil {
		return c, adminOps{}, err
	}
	if err := c.requireDatabase(); err != nil {
		return c, adminOps{}, err
	}
	ts, one, err := resolveOutboxes(&c, inv.Environ, f)
	if err != nil {
		return c, adminOps{}, err
	}
	pools := newAdminPools()
	if one == nil {
		err := severalOutboxes(ctx, &c, ts, pools)
		pools.close()
		return c, adminOps{}, err
	}
	a, err := pools.admin(ctx, *one)
	if err != nil {
		pools.close()
		return c, adminOps{}, err
	}
	return c, adminOps{Admin: a, outbox: *one, pools: pools}, nil
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
