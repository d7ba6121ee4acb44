package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/outbox-relay/outbox-relay/migrations"
)

func cmdMigrate(ctx context.Context, inv *Invocation, args []string) error {
	fs := newFlagSet("migrate [--print] [--schema S] [--tenant T]",
		"Apply the relay's migrations (advisory-locked; safe with several replicas), or print them. Without --schema,\n"+
			"to every schema the configuration lists (RELAY_SCHEMA, RELAY_SCHEMAS, or each tenant's schemas in\n"+
			"RELAY_TENANTS_FILE, each in its database) and to those RELAY_SCHEMA_MATCH matches now, one line each;\n"+
			"with --schema, to that schema alone, created if missing: how a new tenant's schema is made.", inv.Stderr)
	printSQL := fs.Bool("print", false, "print the SQL for --schema, or RELAY_SCHEMA, instead of applying it (no database needed)")
	var of outboxFlags
	of.add(fs, "migrate only this `schema`, created if missing (a new tenant's, which RELAY_SCHEMA_MATCH then finds)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, err := loadConfig(inv.Environ)
	if err != nil {
		return err
	}
	if *printSQL {
		return printMigrations(inv.Stdout, &c, of.Schema)
	}
	if err := c.requireDatabase(); err != nil {
		return err
	}
	ts, one, err := resolveOutboxes(&c, inv.Environ, of)
	if err != nil {
		return err
	}
	pools := newAdminPools()
	defer pools.close()
	if one != nil {
		return migrateOutbox(ctx, inv.Stdout, pools, *one, c.MaxPayloadBytes)
	}
	failed, schemas := 0, 0
	for _, o := range listOutboxes(ctx, ts, pools) {
		if o.Schema == "" && o.Err == nil {
			fmt.Fprintf(inv.Stdout, "%s (`outbox-relay migrate --schema NAME` creates one)\n", o.describe())
			continue
		}
		schemas++
		err := o.Err
		if err == nil {
			err = migrateOutbox(ctx, inv.Stdout, pools, o.outboxRef, c.MaxPayloadBytes)
		}
		if err != nil {
			failed++
			fmt.Fprintf(inv.Stderr, "outbox-relay migrate: %s: %v\n", o.describe(), err)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d not migrated (the errors above say why)", failed, schemas)
	}
	return nil
}

// printMigrations writes the migrations' SQL for schema: --schema, or the
// one schema the configuration names.
func printMigrations(w io.Writer, c *config, schema string) error {
	if err := checkSchemaFlag(schema); err != nil {
		return err
	}
	if schema == "" {
		list := c.schemaList()
		switch {
		case c.TenantsFile != "" || c.SchemaMatch != "" || len(list) > 1:
			return usageError{errors.New("--print: several outboxes are configured; say whose SQL to print with --schema")}
		case len(list) == 1:
			schema = list[0]
		default:
			schema = c.Schema
		}
	}
	sql, err := migrations.Render(schema)
	if err != nil {
		return err
	}
	if c.MaxPayloadBytes > 0 {
		sql += "\n-- RELAY_MAX_PAYLOAD_BYTES: payloads of at most " + strconv.FormatInt(c.MaxPayloadBytes, 10) + " bytes\n" +
			migrations.PayloadLimitSQL(schema, c.MaxPayloadBytes, true)
	}
	_, err = io.WriteString(w, sql)
	return err
}

// migrateOutbox brings o's schema to the latest version, creating it if
// needed, bounds its payloads to payloadLimit bytes when set
// (RELAY_MAX_PAYLOAD_BYTES), and says so in one line.
func migrateOutbox(ctx context.Context, w io.Writer, pools *adminPools, o outboxRef, payloadLimit int64) error {
	pool, err := pools.get(ctx, o.DatabaseURL)
	if err != nil {
		return err
	}
	n, err := applyMigrations(ctx, pool, o.Schema, payloadLimit)
	if permissionDenied(err) {
		return fmt.Errorf("%w: this database user may not create or change schema %s. Run `outbox-relay migrate` as the schema's owner "+
			"(a DBA may create the schema for it: CREATE SCHEMA %s AUTHORIZATION <owner>), or have a DBA apply `outbox-relay migrate --print`", err, o.Schema, o.Schema)
	}
	if err != nil {
		return err
	}
	of := ""
	if o.Tenant != "" {
		of = " of tenant " + o.Tenant
	}
	if n == 0 {
		fmt.Fprintf(w, "schema %s%s is up to date (version %d)\n", o.Schema, of, migrations.Latest())
	} else {
		fmt.Fprintf(w, "schema %s%s migrated to version %d (%s applied)\n", o.Schema, of, migrations.Latest(), plural(int64(n), "migration"))
	}
	return nil
}
