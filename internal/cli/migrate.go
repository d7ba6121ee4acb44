package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/outbox-relay/outbox-relay/migrations"
)

func cmdMigrate(ctx context.Context, inv *Invocation, args []string) error {
	fs := newFlagSet("migrate [--print]", "Apply the relay's migrations to RELAY_SCHEMA (advisory-locked; safe with several replicas), or print them.", inv.Stderr)
	printSQL := fs.Bool("print", false, "print the SQL for RELAY_SCHEMA instead of applying it (no database needed)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, err := loadConfig(inv.Environ)
	if err != nil {
		return err
	}
	if *printSQL {
		sql, err := migrations.Render(c.Schema)
		if err != nil {
			return err
		}
		_, err = io.WriteString(inv.Stdout, sql)
		return err
	}
	if err := c.requireDatabase(); err != nil {
		return err
	}
	pool, err := openPool(ctx, c.DatabaseURL, 1)
	if err != nil {
		return err
	}
	defer pool.Close()
	n, err := applyMigrations(ctx, pool, c.Schema)
	if permissionDenied(err) {
		return fmt.Errorf("%w: this database user may not create or change schema %s. Run `outbox-relay migrate` as the schema's owner "+
			"(a DBA may create the schema for it: CREATE SCHEMA %s AUTHORIZATION <owner>), or have a DBA apply `outbox-relay migrate --print`", err, c.Schema, c.Schema)
	}
	if err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintf(inv.Stdout, "schema %s is up to date (version %d)\n", c.Schema, migrations.Latest())
	} else {
		fmt.Fprintf(inv.Stdout, "schema %s migrated to version %d (%s applied)\n", c.Schema, migrations.Latest(), plural(int64(n), "migration"))
	}
	return nil
}
