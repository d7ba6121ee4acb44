package fleet

import (
	"context"
	"fmt"
	"log/slog"
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
	for _, e := range d.entries {
		if e.Match == "" {
			continue
		}
		schemas, err := d.match(ctx, e.Match)
		if err != nil {
			if ctx.Err() == nil && !d.failing {
				d.log.Warn("search for the schemas to serve failed: the outboxes found before are served meanwhile", "match", e.Match, "err", err)
			}
			d.failing = true
			return
		}
		for _, s := range schemas {
			if outbox.ValidateSchema(s) != nil {
				if !d.refused[s] {
					d.refused[s] = true
					d.log.Warn("schema matches but is not served: its name is not a lower-case identifier", "match", e.Match, "schema_name", fmt.Sprintf("%q", s))
				}
				continue
			}
			if listedHere(d.entries, s) {
				continue // listed: served as such
			}
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
func (d *discovery) match(ctx context.Context, pattern string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, discoverTimeout)
	defer cancel()
	return Discover(ctx, d.pool, pattern)
}

// Discover returns the schemas of pool's database whose name matches the
// LIKE pattern and that hold a migrated outbox, in name order: the search
// a fleet runs every DiscoverEvery, for the operator's commands to list
// the outboxes a pattern stands for. Names that are not valid schema
// names (outbox.ValidateSchema) are returned too: the caller skips them.
func Discover(ctx context.Context, pool *pgxpool.Pool, pattern string) ([]string, error) {
	rows, err := pool.Query(ctx, discoverSQL, pgx.StrictNamedArgs{"match": pattern})
	if err != nil {
		return nil, fmt.Errorf("search schemas: %w", err)
	}
	schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("search schemas: %w", err)
	}
	return schemas, nil
}

// listedHere reports whether an entry lists schema.
func listedHere(entries []Database, schema string) bool {
	for _, e := range entries {
		for _, s := range e.Schemas {
			if s == schema {
				return true
			}
		}
	}
	return false
}
