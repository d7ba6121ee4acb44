package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/fleet"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/admin"
)

// The operator's commands work on the outboxes the configuration names
// (RELAY_SCHEMA, RELAY_SCHEMAS, RELAY_SCHEMA_MATCH or RELAY_TENANTS_FILE),
// and --tenant and --schema pick one of them.

// outboxFlags are the --tenant and --schema flags of the operator's
// commands.
type outboxFlags struct {
	// Tenant names a tenant of RELAY_TENANTS_FILE: its database.
	Tenant string
	// Schema names the outbox's schema; it need not be listed.
	Schema string
}

// add registers --schema, documented as schemaDoc, and --tenant on fs.
func (f *outboxFlags) add(fs *flagSet, schemaDoc string) {
	fs.StringVar(&f.Schema, "schema", "", schemaDoc)
	fs.StringVar(&f.Tenant, "tenant", "", "the `tenant` of RELAY_TENANTS_FILE whose database holds --schema (needed with several tenants, unless only one lists --schema)")
}

// schemaFlagDoc is --schema's help for the commands that work on one
// outbox.
const schemaFlagDoc = "the outbox's `schema` (default: RELAY_SCHEMA, or the only outbox configured); one RELAY_SCHEMA_MATCH matches need not be listed"

// outboxRef is one outbox: a schema of a tenant's database.
type outboxRef struct {
	// Tenant is the tenant's name in RELAY_TENANTS_FILE; empty without it.
	Tenant      string
	DatabaseURL string
	Schema      string
}

// String names the outbox as --tenant and --schema pick it: tenant/schema,
// or the schema alone without tenants.
func (o outboxRef) String() string {
	if o.Tenant == "" {
		return o.Schema
	}
	return o.Tenant + "/" + o.Schema
}

// resolveOutboxes returns the tenants of the configuration that --tenant
// leaves, and, when the flags or the configuration name exactly one outbox,
// that outbox: --schema (in --tenant's database, or in the database of the
// only tenant, or of the only tenant that lists it), or the one schema of a
// configuration without patterns. one is nil when several outboxes remain.
func resolveOutboxes(c *config, environ []string, f outboxFlags) (ts []tenant, one *outboxRef, err error) {
	if err := checkSchemaFlag(f.Schema); err != nil {
		return nil, nil, err
	}
	if f.Tenant != "" && c.TenantsFile == "" {
		return nil, nil, usageError{fmt.Errorf("--tenant %q: tenants are named in RELAY_TENANTS_FILE, which is not set", f.Tenant)}
	}
	if ts, err = c.tenants(environ); err != nil {
		return nil, nil, err
	}
	if f.Tenant != "" {
		i := slices.IndexFunc(ts, func(t tenant) bool { return t.Name == f.Tenant })
		if i < 0 {
			return nil, nil, usageError{fmt.Errorf("--tenant %q: RELAY_TENANTS_FILE (%s) names no such tenant; its tenants: %s", f.Tenant, c.TenantsFile, tenantNames(ts))}
		}
		ts = ts[i : i+1]
	}
	if f.Schema != "" {
		t, err := tenantOfSchema(ts, f.Schema)
		if err != nil {
			return nil, nil, err
		}
		return ts, &outboxRef{Tenant: t.Name, DatabaseURL: t.DatabaseURL, Schema: f.Schema}, nil
	}
	if len(ts) == 1 && ts[0].SchemaMatch == "" && len(ts[0].Schemas) == 1 {
		return ts, &outboxRef{Tenant: ts[0].Name, DatabaseURL: ts[0].DatabaseURL, Schema: ts[0].Schemas[0]}, nil
	}
	return ts, nil, nil
}

// checkSchemaFlag refuses a --schema that is not a valid schema name.
func checkSchemaFlag(schema string) error {
	if schema != "" && outbox.ValidateSchema(schema) != nil {
		return usageError{fmt.Errorf("--schema %q: not a valid schema name: want a lower-case identifier (a letter or underscore, then letters, digits or underscores, at most 63 characters)", schema)}
	}
	return nil
}

// tenantOfSchema returns the tenant whose database holds schema: the only
// one, or the only one that lists it.
func tenantOfSchema(ts []tenant, schema string) (tenant, error) {
	if len(ts) == 1 {
		return ts[0], nil
	}
	var listing []string
	var found tenant
	for _, t := range ts {
		if slices.Contains(t.Schemas, schema) {
			listing, found = append(listing, t.Name), t
		}
	}
	if len(listing) == 1 {
		return found, nil
	}
	why := "no tenant lists it"
	if len(listing) > 1 {
		why = "tenants " + strings.Join(listing, " and ") + " list it"
	}
	return tenant{}, usageError{fmt.Errorf("--schema %s: %s, so say whose database holds it with --tenant: one of %s", schema, why, tenantNames(ts))}
}

// tenantNames lists the tenants' names, separated by commas.
func tenantNames(ts []tenant) string {
	names := make([]string, 0, len(ts))
	for _, t := range ts {
		names = append(names, t.Name)
	}
	return strings.Join(names, ", ")
}

// foundOutbox is an outbox the configuration names now, or, with an empty
// Schema, a tenant's pattern that matched none (Err nil) or whose database
// could not be searched (Err).
type foundOutbox struct {
	outboxRef
	Match string
	Err   error
}

// listOutboxes returns the outboxes of ts: each tenant's listed schemas,
// then the valid names its pattern matches now (fleet.Discover), as the
// relay would serve them.
func listOutboxes(ctx context.Context, ts []tenant, pools *adminPools) []foundOutbox {
	type key struct{ url, schema string }
	listed := map[key]bool{}
	for _, t := range ts {
		for _, s := range t.Schemas {
			listed[key{t.DatabaseURL, s}] = true
		}
	}
	var out []foundOutbox
	for _, t := range ts {
		for _, s := range t.Schemas {
			out = append(out, foundOutbox{outboxRef: outboxRef{Tenant: t.Name, DatabaseURL: t.DatabaseURL, Schema: s}})
		}
		if t.SchemaMatch == "" {
			continue
		}
		pattern := foundOutbox{outboxRef: outboxRef{Tenant: t.Name, DatabaseURL: t.DatabaseURL}, Match: t.SchemaMatch}
		pool, err := pools.get(ctx, t.DatabaseURL)
		var found []fleet.Found
		if err == nil {
			searchCtx, cancel := context.WithTimeout(ctx, connectTimeout)
			found, err = fleet.Discover(searchCtx, pool, t.SchemaMatch, fleet.Trust{Owners: t.SchemaOwners, Listed: listedIn(ts, t.DatabaseURL)})
			cancel()
		}
		if err != nil {
			pattern.Err = err
			out = append(out, pattern)
			continue
		}
		n := 0
		for _, f := range found {
			s := f.Schema
			if outbox.ValidateSchema(s) != nil || !f.Trusted || listed[key{t.DatabaseURL, s}] {
				continue // not served (the relay says why), or served as listed
			}
			listed[key{t.DatabaseURL, s}] = true
			out = append(out, foundOutbox{outboxRef: outboxRef{Tenant: t.Name, DatabaseURL: t.DatabaseURL, Schema: s}, Match: t.SchemaMatch})
			n++
		}
		if n == 0 {
			out = append(out, pattern)
		}
	}
	return out
}

// listedIn returns the schemas ts list in the database at url.
func listedIn(ts []tenant, url string) []string {
	var out []string
	for _, t := range ts {
		if t.DatabaseURL == url {
			out = append(out, t.Schemas...)
		}
	}
	return out
}

// describe names a found outbox for a list: tenant/schema, or what its
// pattern found.
func (o foundOutbox) describe() string {
	if o.Schema != "" {
		return o.String()
	}
	what := "no schema matching " + safe(o.Match) + " holds an outbox yet"
	if o.Err != nil {
		what = "the schemas matching " + safe(o.Match) + " (cannot list them: " + oneLine(o.Err.Error(), 200) + ")"
	}
	if o.Tenant != "" {
		what = o.Tenant + ": " + what
	}
	return what
}

// severalOutboxes is the usage error of a command that works on one outbox
// when the configuration names several and the flags pick none: it lists
// those it could mean.
func severalOutboxes(ctx context.Context, c *config, ts []tenant, pools *adminPools) error {
	source, pick := "RELAY_SCHEMAS", "--schema"
	switch {
	case c.TenantsFile != "":
		source, pick = "RELAY_TENANTS_FILE", "--schema (and --tenant)"
	case c.SchemaMatch != "" && len(c.schemaList()) > 0:
		source = "RELAY_SCHEMAS and RELAY_SCHEMA_MATCH"
	case c.SchemaMatch != "":
		source = "RELAY_SCHEMA_MATCH"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s names several outboxes and this command works on one: pick it with %s; it could be", source, pick)
	for _, o := range listOutboxes(ctx, ts, pools) {
		b.WriteString("\n  " + o.describe())
	}
	return usageError{fmt.Errorf("%s", b.String())}
}

// connectTimeout bounds an operator's command's first connection to a
// database, and a search for a pattern's schemas.
const connectTimeout = 10 * time.Second

// adminPools holds a command's pools, one per database, and remembers a
// database that could not be reached, so that each is tried once.
type adminPools struct {
	pools map[string]*pgxpool.Pool
	errs  map[string]error
}

func newAdminPools() *adminPools {
	return &adminPools{pools: map[string]*pgxpool.Pool{}, errs: map[string]error{}}
}

// get returns the pool of the database at url, connected.
func (p *adminPools) get(ctx context.Context, url string) (*pgxpool.Pool, error) {
	if err, ok := p.errs[url]; ok {
		return nil, err
	}
	if pool, ok := p.pools[url]; ok {
		return pool, nil
	}
	pool, err := openPool(ctx, url, adminPoolSize, nil)
	if err == nil {
		pingCtx, cancel := context.WithTimeout(ctx, connectTimeout)
		err = pool.Ping(pingCtx)
		cancel()
		if err != nil {
			pool.Close()
			err = fmt.Errorf("connect to database: %w", err)
		}
	}
	if err != nil {
		p.errs[url] = err
		return nil, err
	}
	p.pools[url] = pool
	return pool, nil
}

// admin returns the operator API on o, once its schema is checked.
func (p *adminPools) admin(ctx context.Context, o outboxRef) (*admin.Admin, error) {
	pool, err := p.get(ctx, o.DatabaseURL)
	if err != nil {
		return nil, err
	}
	if err := checkSchema(ctx, pool, o.Schema); err != nil {
		return nil, err
	}
	return admin.New(pool, o.Schema)
}

func (p *adminPools) close() {
	for _, pool := range p.pools {
		pool.Close()
	}
}
