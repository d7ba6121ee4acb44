package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/outbox-relay/outbox-relay/relay/admin"
)

func cmdReplay(ctx context.Context, inv *Invocation, args []string) error {
	stdout, stderr := inv.Stdout, inv.Stderr
	fs := newFlagSet("replay [--from T] [--to T] [--by delivered|created] [--topic T] [--key K] [--new-keys] [--all] [--dry-run] [--schema S] [--tenant T]",
		"Send delivered (archived) rows again: each becomes a new row in the hot table, due now.\n"+
			"By default the replay keeps the original idempotency key (and forgets it in delivered_keys, so that the\n"+
			"relay sends it): consumers see the same message id again and those that dedupe by it drop the replay,\n"+
			"as JetStream does within its duplicate window. That is for consumers that lost data. --new-keys sends\n"+
			"new events that every consumer processes. Rows whose key is pending are skipped.", stderr)
	var opts admin.ReplayOptions
	fs.Var((*timeFlag)(&opts.From), "from", "from `time` (inclusive): RFC 3339 (2026-01-02T15:04:05Z) or a duration ago (24h)")
	fs.Var((*timeFlag)(&opts.To), "to", "to `time` (exclusive): RFC 3339 or a duration ago")
	by := fs.String("by", "delivered", "what --from and --to bound: `delivered` (delivered_at) or created (created_at)")
	fs.StringVar(&opts.Topic, "topic", "", "`topic`, exactly, or a LIKE pattern when it contains % (orders.%)")
	fs.StringVar(&opts.Key, "key", "", "ordering `key`, exactly")
	fs.BoolVar(&opts.NewKeys, "new-keys", false, "give every replayed row a new idempotency key: new events for every consumer")
	fs.BoolVar(&opts.All, "all", false, "replay the whole archive when no filter is given")
	fs.BoolVar(&opts.DryRun, "dry-run", false, "count what would be replayed, change nothing")
	var of outboxFlags
	of.add(fs, schemaFlagDoc)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch *by {
	case "delivered", "delivered_at":
		opts.By = admin.DeliveredAt
	case "created", "created_at":
		opts.By = admin.CreatedAt
	default:
		return usageError{fmt.Errorf("--by %q: want delivered or created", *by)}
	}
	if !opts.From.IsZero() && !opts.To.IsZero() && !opts.From.Before(opts.To) {
		return usageError{errors.New("--from must be before --to")}
	}
	_, ops, err := openAdmin(ctx, inv, of)
	if err != nil {
		return err
	}
	defer ops.close()
	res, err := ops.Replay(ctx, opts)
	if err != nil {
		return noFilterAsUsage(err, opts.Topic, "select archived rows with --from, --to, --topic or --key, or pass --all to replay the whole archive")
	}
	printReplay(stdout, res)
	return nil
}

func printReplay(w io.Writer, res admin.ReplayResult) {
	if res.Matched == 0 {
		fmt.Fprintln(w, "no archived rows match (rows archived as duplicates are never replayed)")
		return
	}
	keys := "original idempotency keys"
	if res.NewKeys {
		keys = "new idempotency keys"
	}
	if res.DryRun {
		fmt.Fprintf(w, "would replay %s with %s (dry run)\n", plural(res.Replayed, "event"), keys)
	} else {
		fmt.Fprintf(w, "replayed %s with %s (in the hot table, due now)\n", plural(res.Replayed, "event"), keys)
	}
	if res.Matched != res.Events {
		repeats := res.Matched - res.Events
		what := "a repeated delivery"
		if repeats != 1 {
			what = "repeated deliveries"
		}
		fmt.Fprintf(w, "%s matched, %d of them %s of an event already counted: each event is replayed once, from its latest delivery\n",
			plural(res.Matched, "archived row"), repeats, what)
	}
	if res.SkippedPending > 0 {
		verb := "skipped"
		if res.DryRun {
			verb = "would skip"
		}
		fmt.Fprintf(w, "%s %s: a row with the same idempotency key is pending, so the event is on its way already\n",
			verb, plural(res.SkippedPending, "event"))
	}
	if !res.NewKeys && res.Replayed > 0 {
		verb := "forgot"
		if res.DryRun {
			verb = "would forget"
		}
		fmt.Fprintf(w, "%s %s in delivered_keys, so that the relay sends the replays instead of archiving them as duplicates\n",
			verb, plural(res.ForgottenKeys, "delivered key"))
		fmt.Fprintln(w, "note: consumers see the same message ids again (Nats-Msg-Id, webhook-id); JetStream drops them within its\n"+
			"  duplicate window and consumers that dedupe by id drop them too; --new-keys sends new events instead")
	}
}
