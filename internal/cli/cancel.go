package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/admin"
)

func cmdCancel(ctx context.Context, inv *Invocation, args []string) error {
	stdout, stderr := inv.Stdout, inv.Stderr
	fs := newFlagSet("cancel (--key K | --topic T) [--dry-run] [--schema S] [--tenant T]",
		"Move pending rows of an ordering key or a topic to the dead letters (reason cancelled), so that they are\n"+
			"not delivered. Rows in flight (under a running lease) are left alone: a relay may be delivering them.\n"+
			"Undo with `outbox-relay dead retry --reason cancelled` and the same --key or --topic.", stderr)
	var opts admin.CancelOptions
	fs.StringVar(&opts.Key, "key", "", "ordering `key`, exactly")
	fs.StringVar(&opts.Topic, "topic", "", "`topic`, exactly, or a LIKE pattern when it contains % (orders.%); with --key both must match")
	fs.BoolVar(&opts.DryRun, "dry-run", false, "count what would be cancelled, change nothing")
	var of outboxFlags
	of.add(fs, schemaFlagDoc)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if opts.Key == "" && opts.Topic == "" {
		return usageError{errors.New("name the rows to cancel with --key or --topic")}
	}
	if opts.Key == "" && admin.TopicMatchesAll(opts.Topic) {
		return usageError{fmt.Errorf("--topic %q matches every topic: name the rows to cancel with --key or a narrower --topic", opts.Topic)}
	}
	_, ops, err := openAdmin(ctx, inv, of)
	if err != nil {
		return err
	}
	defer ops.close()
	res, err := ops.Cancel(ctx, opts)
	if err != nil {
		return noFilterAsUsage(err, opts.Topic, "name the rows to cancel with --key or --topic")
	}
	if res.Matched == 0 {
		fmt.Fprintln(stdout, "no pending rows match")
		return nil
	}
	if res.DryRun {
		fmt.Fprintf(stdout, "would cancel %s (dry run)\n", plural(res.Cancelled, "pending row"))
	} else {
		fmt.Fprintf(stdout, "cancelled %s (moved to the dead letters with reason %s)\n", plural(res.Cancelled, "pending row"), outbox.ReasonCancelled)
	}
	if res.InFlight > 0 {
		verb := "left"
		if res.DryRun {
			verb = "would leave"
		}
		it := "it"
		if res.InFlight != 1 {
			it = "them"
		}
		fmt.Fprintf(stdout, "%s alone %s in flight: a relay may be delivering %s right now; run cancel again once\n"+
			"  the lease ends (RELAY_LEASE); a row delivered meanwhile is in the archive instead\n",
			verb, plural(res.InFlight, "row"), it)
	}
	return nil
}
