package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/relay/admin"
)

func cmdDead(ctx context.Context, inv *Invocation, args []string) error {
	stderr := inv.Stderr
	usage := func() {
		fmt.Fprint(stderr, "Usage: outbox-relay dead <list|retry|purge> [flags]\n\n"+
			"Inspect and repair dead letters: messages that will not be delivered without an operator.\n\n"+
			"  list   show dead letters (oldest failure first)\n"+
			"  retry  move dead letters back to the hot table, to be delivered again\n"+
			"  purge  delete dead letters\n\n"+
			"`outbox-relay dead <command> -h` shows one command's flags; here are all three.\n")
	}
	// fullUsage follows the overview with each command's own usage and
	// flags, as `dead <command> -h` prints them.
	fullUsage := func() {
		usage()
		for _, sub := range []func(context.Context, *Invocation, []string) error{cmdDeadList, cmdDeadRetry, cmdDeadPurge} {
			fmt.Fprintln(stderr)
			_ = sub(ctx, inv, []string{"-h"})
		}
	}
	if len(args) == 0 {
		usage()
		return usageError{errors.New("dead needs a command: list, retry or purge (outbox-relay dead -h lists their flags)")}
	}
	switch args[0] {
	case "list":
		return cmdDeadList(ctx, inv, args[1:])
	case "retry":
		return cmdDeadRetry(ctx, inv, args[1:])
	case "purge":
		return cmdDeadPurge(ctx, inv, args[1:])
	case "-h", "-help", "--help", "help":
		fullUsage()
		return errHelpShown
	}
	usage()
	return usageError{fmt.Errorf("unknown dead command %q: want list, retry or purge (outbox-relay dead -h lists their flags)", args[0])}
}

// deadFilterFlags registers the dead-letter filter flags on fs.
func deadFilterFlags(fs *flag.FlagSet, f *admin.DeadFilter, limit int, limitDoc string) {
	fs.Var((*idsFlag)(&f.IDs), "id", "dead letter `id`; repeat the flag or separate ids with commas")
	fs.StringVar(&f.Topic, "topic", "", "`topic`, exactly, or a LIKE pattern when it contains % (orders.%)")
	fs.StringVar(&f.Key, "key", "", "ordering `key`, exactly")
	fs.StringVar(&f.Reason, "reason", "", "`reason`: permanent, exhausted, no_sink or cancelled")
	fs.StringVar(&f.Destination, "destination", "", "`sink` the row was for, exactly; (default) for rows without a destination")
	fs.StringVar(&f.Error, "error", "", "`text` found anywhere in the error, ignoring case")
	fs.Var((*timeFlag)(&f.Since), "since", "failed at or after `time`: RFC 3339 (2026-01-02T15:04:05Z) or a duration ago (24h)")
	f.Limit = limit
	fs.Var((*limitFlag)(&f.Limit), "limit", limitDoc)
}

func cmdDeadList(ctx context.Context, inv *Invocation, args []string) error {
	stdout, stderr := inv.Stdout, inv.Stderr
	fs := newFlagSet("dead list [filters] [--limit N] [--wide] [--json] [--schema S] [--tenant T]",
		"List dead letters, oldest failure first (by failed_at, then id), without their payloads. Follow an event\n"+
			"across retries by its idempotency key, which never changes.", stderr)
	var f admin.DeadFilter
	deadFilterFlags(fs.FlagSet, &f, 50, "show at most `n` dead letters; 0 shows all")
	wide := fs.Bool("wide", false, fmt.Sprintf("show each error whole; without it an error is cut at %d characters", deadErrorWidth))
	asJSON := fs.Bool("json", false, "print JSON (for scripts), errors whole")
	var of outboxFlags
	of.add(fs, schemaFlagDoc)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	_, ops, err := openAdmin(ctx, inv, of)
	if err != nil {
		return err
	}
	defer ops.close()
	list, err := ops.ListDead(ctx, f)
	if err != nil {
		return noFilterAsUsage(err, f.Topic, "")
	}
	if *asJSON {
		return writeJSON(stdout, list)
	}
	if list.Matched == 0 {
		fmt.Fprintln(stdout, "no dead letters match")
		return nil
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, "ID\tFAILED AT\tREASON\tATTEMPTS\tTOPIC\tKEY\tIDEMPOTENCY KEY\tDESTINATION\tERROR")
	cut := false
	for _, d := range list.Letters {
		msg := safe(d.Error)
		if !*wide {
			short := oneLine(msg, deadErrorWidth)
			cut = cut || short != strings.Join(strings.Fields(msg), " ")
			msg = short
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", d.ID, d.FailedAt.UTC().Format(time.RFC3339), safe(d.Reason), d.Attempts,
			safe(d.Topic), orDash(safe(d.Key)), safe(d.IdempotencyKey), orDash(safe(d.Destination)), msg)
	}
	tw.Flush()
	if cut {
		fmt.Fprintf(stdout, "errors longer than %d characters are cut (…): --wide or --json shows them whole\n", deadErrorWidth)
	}
	if int64(len(list.Letters)) < list.Matched {
		fmt.Fprintf(stdout, "%d of %d dead letters shown (--limit)\n", len(list.Letters), list.Matched)
	} else {
		fmt.Fprintf(stdout, "%s\n", plural(list.Matched, "dead letter"))
	}
	return nil
}

// deadErrorWidth is where dead list cuts an error without --wide.
const deadErrorWidth = 60

func cmdDeadRetry(ctx context.Context, inv *Invocation, args []string) error {
	stdout, stderr := inv.Stdout, inv.Stderr
	fs := newFlagSet("dead retry [filters] [--set-topic T] [--set-destination S] [--limit N] [--all] [--dry-run] [--schema S] [--tenant T]",
		"Move dead letters back to the hot table as new rows (attempts 0, due now; a cancelled row still delayed keeps\n"+
			"its time), keeping their payload, headers, keys, destination and created_at; --set-topic and --set-destination\n"+
			"re-route them. Dead letters whose idempotency key is pending or already delivered stay.", stderr)
	var opts admin.RetryDeadOptions
	deadFilterFlags(fs.FlagSet, &opts.DeadFilter, 0, "retry at most `n` dead letters, oldest failure first; 0 retries every match")
	fs.BoolVar(&opts.All, "all", false, "retry every dead letter when no filter is given")
	fs.StringVar(&opts.SetTopic, "set-topic", "", "re-route: give the retried rows this `topic`")
	fs.StringVar(&opts.SetDestination, "set-destination", "", "re-route: send the retried rows to this `sink`; (default) for the default sink")
	fs.BoolVar(&opts.DryRun, "dry-run", false, "count what would be retried, change nothing")
	var of outboxFlags
	of.add(fs, schemaFlagDoc)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	_, ops, err := openAdmin(ctx, inv, of)
	if err != nil {
		return err
	}
	defer ops.close()
	res, err := ops.RetryDead(ctx, opts)
	if err != nil {
		return noFilterAsUsage(err, opts.Topic, "name dead letters with --id, --topic, --key, --reason, --error or --since, or pass --all to retry every one")
	}
	printRetry(stdout, res)
	return nil
}

func printRetry(w io.Writer, res admin.RetryDeadResult) {
	if res.Matched == 0 {
		fmt.Fprintln(w, "no dead letters match")
		return
	}
	if res.DryRun {
		fmt.Fprintf(w, "would retry %s (dry run)\n", plural(res.Retried, "dead letter"))
	} else {
		fmt.Fprintf(w, "retried %s (back in the hot table)\n", plural(res.Retried, "dead letter"))
	}
	verb := "left"
	if res.DryRun {
		verb = "would leave"
	}
	if res.SkippedPending > 0 {
		fmt.Fprintf(w, "%s %s in place: a row with the same idempotency key is pending; retry after it is delivered\n",
			verb, plural(res.SkippedPending, "dead letter"))
	}
	if res.SkippedDelivered > 0 {
		fmt.Fprintf(w, "%s %s in place: the idempotency key was already delivered by another row, so the relay would archive\n"+
			"  a retry as a duplicate without sending it (ids %s); inspect with `outbox-relay dead list --id ...`,\n"+
			"  and purge once you are sure the destination has the event\n",
			verb, plural(res.SkippedDelivered, "dead letter"), joinIDs(res.DeliveredIDs, 20))
	}
	if len(res.Refused) > 0 {
		them := "them"
		if len(res.Refused) == 1 {
			them = "it"
		}
		fmt.Fprintf(w, "left %s in place: the outbox table refuses to take %s back; fix what the reason names, or purge %s:\n",
			plural(int64(len(res.Refused)), "dead letter"), them, them)
		for _, r := range res.Refused {
			fmt.Fprintf(w, "  id %d: %s\n", r.ID, safe(r.Reason))
		}
	}
}

func cmdDeadPurge(ctx context.Context, inv *Invocation, args []string) error {
	stdout, stderr := inv.Stdout, inv.Stderr
	fs := newFlagSet("dead purge [filters] [--limit N] [--all] [--dry-run] [--schema S] [--tenant T]",
		"Delete dead letters for good.", stderr)
	var opts admin.PurgeDeadOptions
	deadFilterFlags(fs.FlagSet, &opts.DeadFilter, 0, "purge at most `n` dead letters, oldest failure first; 0 purges every match")
	fs.BoolVar(&opts.All, "all", false, "purge every dead letter when no filter is given")
	fs.BoolVar(&opts.DryRun, "dry-run", false, "count what would be purged, change nothing")
	var of outboxFlags
	of.add(fs, schemaFlagDoc)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	_, ops, err := openAdmin(ctx, inv, of)
	if err != nil {
		return err
	}
	defer ops.close()
	res, err := ops.PurgeDead(ctx, opts)
	if err != nil {
		return noFilterAsUsage(err, opts.Topic, "name dead letters with --id, --topic, --key, --reason, --error or --since, or pass --all to purge every one")
	}
	switch {
	case res.Purged == 0:
		fmt.Fprintln(stdout, "no dead letters match")
	case res.DryRun:
		fmt.Fprintf(stdout, "would purge %s (dry run)\n", plural(res.Purged, "dead letter"))
	default:
		fmt.Fprintf(stdout, "purged %s\n", plural(res.Purged, "dead letter"))
	}
	return nil
}
