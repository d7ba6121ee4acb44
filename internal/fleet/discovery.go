package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
)

// discovery searches one database for the schemas its entries' patterns
// match, starting the outboxes that appear and stopping those that go.
type discovery struct {
	f        *Fleet
	pool     *pgxpool.Pool
	listener *relay.Listener
	url      string
	entries  []Database
	log      *slog.Logger

	// found are the schemas the last search started, by the entry that
	// found them; refused are the names a search skipped, said once.
	found   map[string]Database
	refused map[string]bool
	failing bool
}

// discoverTimeout bounds one search.
const discoverTimeout = 10 * time.Second

// loop searches at once, then every DiscoverEvery, until ctx ends.
func (d *discovery) loop(ctx context.Context) {
	d.found, d.refused = map[string]Database{}, map[string]bool{}
	t := time.NewTicker(d.f.cfg.DiscoverEvery)
	defer t.Stop()
	for {
		d.search(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// search runs every entry's pattern once and applies what it found. A
// failed search changes nothing.
func (d *discovery) search(ctx context.Context) {
	now := map[string]Database{}
	listed := listedSchemas(d.entries)
	for _, e := range d.entries {
		if e.Match == "" {
			continue
		}
		found, err := d.match(ctx, e.Match, Trust{Owners: e.Owners, Listed: listed})
		if err != nil {
			if ctx.Err() == nil && !d.failing {
				d.log.Warn("search for the schemas to serve failed: the outboxes found before are served meanwhile", "match", e.Match, "err", err)
			}
			d.failing = true
			return
		}
		for _, f := range found {
			s := f.Schema
			if outbox.ValidateSchema(s) != nil {
				if !d.refused[s] {
					d.refused[s] = true
					d.log.Warn("schema matches but is not served: its name is not a lower-case identifier", "match", e.Match, "schema_name", fmt.Sprintf("%q", s))
				}
				continue
			}
			if slices.Contains(listed, s) {
				continue // listed: served as such
			}
			if !f.Trusted {
				if key := "owner:" + s; !d.refused[key] {
					d.refused[key] = true
					d.log.Warn("schema matches but is not served: it or its messages table is owned by a role that is not a trusted owner, "+
						"and its owner's triggers would run as the relay's role; add the owner to RELAY_SCHEMA_OWNERS (a tenant's schema_owners) to serve it",
						"match", e.Match, "schema", s, "schema_owner", f.Owner, "table_owner", f.TableOwner,
						"trusted_owners", strings.Join(f.Owners, ","))
				}
				continue
			}
			delete(d.refused, "owner:"+s) // said again if it turns untrusted again
			if _, ok := now[s]; !ok {
				now[s] = e
			}
		}
	}
	if d.failing {
		d.log.Info("search for the schemas to serve works again")
		d.failing = false
	}
	d.f.searched(d.url)
	for s, e := range now {
		if _, ok := d.found[s]; !ok {
			d.log.Info("schema found: serving its outbox", "tenant_match", e.Match, "schema", s)
			d.f.start(ctx, d.pool, d.listener, d.url, e, s)
		}
	}
	for s := range d.found {
		if _, ok := now[s]; !ok {
			d.log.Info("schema gone (dropped, renamed, or no longer an outbox): its relay stops", "schema", s)
			d.f.stop(d.url, s)
		}
	}
	d.found = now
}

// match returns the schemas that match pattern and hold a migrated outbox.
func (d *discovery) match(ctx context.Context, pattern string, trust Trust) ([]Found, error) {
	ctx, cancel := context.WithTimeout(ctx, discoverTimeout)
	defer cancel()
	return Discover(ctx, d.pool, pattern, trust)
}

// Trust says whose matched schemas are served: a schema's triggers, and
// those of its tables, run as the role of whoever writes to them, so a
// matched schema's owner could act as the relay's role.
type Trust struct {
	// Owners are the trusted roles. Empty: the role the relay connects as
	// (current_user) and the owners of the schemas in Listed.
	Owners []string
	// Listed are the schemas the configuration names for the database.
	Listed []string
}

// Found is a schema a pattern matched that holds a migrated outbox.
type Found struct {
	Schema string
	// Owner and TableOwner are the roles that own the schema and its
	// messages table.
	Owner, TableOwner string
	// Trusted is set when both are trusted owners: only then is the
	// schema served.
	Trusted bool
	// Owners are the trusted owners the search used: Trust.Owners, or its
	// default.
	Owners []string
}

// Discover returns the schemas of pool's database whose name matches the
// LIKE pattern and that hold a migrated outbox, in name order, each with
// its owners and whether trust lets it be served: the search a fleet runs
// every DiscoverEvery, for the operator's commands to list the outboxes a
// pattern stands for. Names that are not valid schema names
// (outbox.ValidateSchema) are returned too: the caller skips them, as it
// skips those that are not Trusted.
func Discover(ctx context.Context, pool *pgxpool.Pool, pattern string, trust Trust) ([]Found, error) {
	var owners any // null: the default
	if len(trust.Owners) > 0 {
		owners = trust.Owners
	}
	rows, err := pool.Query(ctx, discoverSQL, pgx.StrictNamedArgs{"match": pattern, "owners": owners, "listed": append([]string{}, trust.Listed...)})
	if err != nil {
		return nil, fmt.Errorf("search schemas: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Found])
	if err != nil {
		return nil, fmt.Errorf("search schemas: %w", err)
	}
	return found, nil
}

// listedSchemas returns the schemas the entries list.
func listedSchemas(entries []Database) []string {
	var out []string
	for _, e := range entries {
		for _, s := range e.Schemas {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}
