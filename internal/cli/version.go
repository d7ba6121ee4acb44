package cli

import (
	"context"
	"fmt"

	"github.com/outbox-relay/outbox-relay/migrations"
)

func cmdVersion(_ context.Context, inv *Invocation, args []string) error {
	fs := newFlagSet("version", "Print the version.", inv.Stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(inv.Stdout, "outbox-relay %s (schema version %d)\n", inv.Version, migrations.Latest())
	return nil
}
