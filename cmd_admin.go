package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/admin"
)

// The operator's commands: status, dead, replay and cancel. They need
// DATABASE_URL (and RELAY_SCHEMA), no sink, and work whether relays run or
// not; the work is done by package relay/admin.

// adminPoolSize covers an admin command's single transaction.
const adminPoolSize = 2

// openAdmin reads the configuration and connects to a schema the relay's
// migrations created.
func openAdmin(ctx context.Context, environ []string) (config, *pgxpool.Pool, error) {
	c, err := loadConfig(environ)
	if err != nil {
		return c, nil, err
	}
	if err := c.requireDatabase(); err != nil {
		return c, nil, err
	}
	pool, err := openPool(ctx, c, adminPoolSize)
	if err != nil {
		return c, nil, err
	}
	if err := checkSchema(ctx, pool, c.Schema); err != nil {
		pool.Close()
		return c, nil, err
	}
	return c, pool, nil
}

// defaultSinkName is how status names the destination of rows without
// one: RELAY_SINK, the only configured sink, or admin.DefaultSinkLabel.
func defaultSinkName(c config) string {
	if c.Sink != "" {
		return c.Sink
	}
	if names := c.sinkNames(); len(names) == 1 {
		return names[0]
	}
	return admin.DefaultSinkLabel
}

func cmdStatus(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status [--json] [--exact] [--top N]",
		"Show the backlog per destination, the rows in flight per relay, rows in backoff and delayed,\n"+
			"dead letters by reason and by error, and the size and vacuum state of the relay's tables.\n"+
			"Reads the database only; works while no relay runs.", stderr)
	asJSON := fs.Bool("json", false, "print JSON (for scripts)")
	exact := fs.Bool("exact", false, "count the archive and delivered_keys exactly (full scans) instead of using estimates")
	top := fs.Int("top", admin.TopErrorsDefault, "how many of the most frequent dead-letter errors to show")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, pool, err := openAdmin(ctx, environ)
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := admin.Status(ctx, pool, c.Schema, admin.StatusOptions{DefaultSink: defaultSinkName(c), TopErrors: *top, ExactCounts: *exact})
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, st)
	}
	printStatus(stdout, c.Schema, st)
	return nil
}

func printStatus(w io.Writer, schema string, st *admin.StatusReport) {
	fmt.Fprintf(w, "Schema %s at %s\n\n", schema, st.At.UTC().Format(time.RFC3339))
	if len(st.Destinations) == 0 {
		fmt.Fprintln(w, "Hot table: empty (nothing pending)")
	} else {
		tw := newTable(w)
		fmt.Fprintln(tw, "DESTINATION\tPENDING\tDUE\tOLDEST DUE\tIN FLIGHT\tBACKOFF\tNEXT RETRY\tDELAYED\tNEXT DELAYED")
		rows := st.Destinations
		if len(rows) > 1 {
			total := st.Total()
			total.Destination = "total"
			rows = append(rows[:len(rows):len(rows)], total)
		}
		for _, d := range rows {
			oldest := "-"
			if d.OldestDueAt != nil {
				oldest = formatAge(time.Duration(d.OldestDueAgeSeconds * float64(time.Second)))
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t%s\t%d\t%s\n", d.Destination, d.Pending, d.Due, oldest,
				d.InFlight, d.Backoff, relTime(d.NextRetryAt, st.At), d.Delayed, relTime(d.NextDelayedAt, st.At))
		}
		tw.Flush()
	}

	fmt.Fprintln(w)
	if len(st.Leases) == 0 {
		fmt.Fprintln(w, "In flight: none")
	} else {
		tw := newTable(w)
		fmt.Fprintln(tw, "IN FLIGHT BY RELAY\tROWS\tEARLIEST LEASE END\tLATEST LEASE END")
		for _, l := range st.Leases {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", l.RelayID, l.Rows, relTime(&l.EarliestLeaseEnd, st.At), relTime(&l.LatestLeaseEnd, st.At))
		}
		tw.Flush()
	}

	fmt.Fprintln(w)
	dl := st.DeadLetters
	if dl.Total == 0 {
		fmt.Fprintln(w, "Dead letters: none")
	} else {
		fmt.Fprintf(w, "Dead letters: %d (outbox-relay dead list)\n", dl.Total)
		tw := newTable(w)
		fmt.Fprintln(tw, "REASON\tCOUNT\tLAST FAILED")
		for _, r := range dl.ByReason {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", r.Value, r.Count, relTime(&r.LastFailedAt, st.At))
		}
		tw.Flush()
		fmt.Fprintln(w)
		tw = newTable(w)
		fmt.Fprintln(tw, "TOP ERRORS\tCOUNT\tLAST FAILED")
		for _, e := range dl.TopErrors {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", oneLine(e.Value, 80), e.Count, relTime(&e.LastFailedAt, st.At))
		}
		tw.Flush()
	}

	fmt.Fprintln(w)
	tw := newTable(w)
	fmt.Fprintln(tw, "TABLE\tROWS\tSIZE\tLIVE TUPLES\tDEAD TUPLES\tLAST VACUUM\tLAST AUTOVACUUM")
	for _, t := range st.Tables {
		rows := strconv.FormatInt(t.Rows, 10)
		if !t.RowsExact {
			rows = "~" + rows
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", t.Table, rows, formatBytes(t.TotalBytes),
			t.LiveTuples, t.DeadTuples, relTimeOr(t.LastVacuum, st.At, "never"), relTimeOr(t.LastAutovacuum, st.At, "never"))
	}
	tw.Flush()
	for _, t := range st.Tables {
		if !t.RowsExact {
			fmt.Fprintln(w, "~ estimated from statistics; --exact counts")
			break
		}
	}
}

func cmdDead(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	usage := func() {
		fmt.Fprint(stderr, "Usage: outbox-relay dead <list|retry|purge> [flags]\n\n"+
			"Inspect and repair dead letters: messages that will not be delivered without an operator.\n\n"+
			"  list   show dead letters (oldest first)\n"+
			"  retry  move dead letters back to the hot table, to be delivered again\n"+
			"  purge  delete dead letters\n\n"+
			"`outbox-relay dead <command> -h` shows the flags.\n")
	}
	if len(args) == 0 {
		usage()
		return usageError{errors.New("dead needs a command: list, retry or purge")}
	}
	switch args[0] {
	case "list":
		return cmdDeadList(ctx, args[1:], environ, stdout, stderr)
	case "retry":
		return cmdDeadRetry(ctx, args[1:], environ, stdout, stderr)
	case "purge":
		return cmdDeadPurge(ctx, args[1:], environ, stdout, stderr)
	case "-h", "-help", "--help", "help":
		usage()
		return errHelpShown
	}
	usage()
	return usageError{fmt.Errorf("unknown dead command %q: want list, retry or purge", args[0])}
}

// deadFilterFlags registers the dead-letter filter flags on fs.
func deadFilterFlags(fs *flag.FlagSet, f *admin.DeadFilter, limit int, limitDoc string) {
	fs.Var((*idsFlag)(&f.IDs), "id", "dead letter `id`; repeat the flag or separate ids with commas")
	fs.StringVar(&f.Topic, "topic", "", "`topic`, exactly, or a LIKE pattern when it contains % (orders.%)")
	fs.StringVar(&f.Key, "key", "", "ordering `key`, exactly")
	fs.StringVar(&f.Reason, "reason", "", "`reason`: permanent, exhausted, no_sink or cancelled")
	fs.StringVar(&f.Error, "error", "", "`text` found anywhere in the error, ignoring case")
	fs.Var((*timeFlag)(&f.Since), "since", "failed at or after `time`: RFC 3339 (2026-01-02T15:04:05Z) or a duration ago (24h)")
	fs.IntVar(&f.Limit, "limit", limit, limitDoc)
}

func cmdDeadList(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("dead list [--topic T] [--key K] [--reason R] [--error TEXT] [--since T] [--id N] [--limit N] [--json]",
		"List dead letters, oldest first, without their payloads.", stderr)
	var f admin.DeadFilter
	deadFilterFlags(fs.FlagSet, &f, 50, "show at most `n` dead letters; 0 shows all")
	asJSON := fs.Bool("json", false, "print JSON (for scripts)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, pool, err := openAdmin(ctx, environ)
	if err != nil {
		return err
	}
	defer pool.Close()
	list, err := admin.ListDead(ctx, pool, c.Schema, f)
	if err != nil {
		return err
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
	for _, d := range list.Letters {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", d.ID, d.FailedAt.UTC().Format(time.RFC3339), d.Reason, d.Attempts,
			d.Topic, orDash(d.Key), d.IdempotencyKey, orDash(d.Destination), oneLine(d.Error, 60))
	}
	tw.Flush()
	if int64(len(list.Letters)) < list.Matched {
		fmt.Fprintf(stdout, "%d of %d dead letters shown (--limit)\n", len(list.Letters), list.Matched)
	} else {
		fmt.Fprintf(stdout, "%s\n", plural(list.Matched, "dead letter"))
	}
	return nil
}

func cmdDeadRetry(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("dead retry [--topic T] [--key K] [--reason R] [--error TEXT] [--since T] [--id N] [--limit N] [--all] [--dry-run]",
		"Move dead letters back to the hot table as new rows (attempts 0, due now), keeping their payload, headers,\n"+
			"keys, destination and created_at. Dead letters whose idempotency key is pending or already delivered stay.", stderr)
	var opts admin.RetryDeadOptions
	deadFilterFlags(fs.FlagSet, &opts.DeadFilter, 0, "retry at most `n` dead letters, oldest first; 0 retries every match")
	fs.BoolVar(&opts.All, "all", false, "retry every dead letter when no filter is given")
	fs.BoolVar(&opts.DryRun, "dry-run", false, "count what would be retried, change nothing")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, pool, err := openAdmin(ctx, environ)
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := admin.RetryDead(ctx, pool, c.Schema, opts)
	if err != nil {
		return noFilterAsUsage(err, "name dead letters with --id, --topic, --key, --reason, --error or --since, or pass --all to retry every one")
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
		fmt.Fprintf(w, "retried %s (back in the hot table, due now)\n", plural(res.Retried, "dead letter"))
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
}

func cmdDeadPurge(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("dead purge [--topic T] [--key K] [--reason R] [--error TEXT] [--since T] [--id N] [--limit N] [--all] [--dry-run]",
		"Delete dead letters for good.", stderr)
	var opts admin.PurgeDeadOptions
	deadFilterFlags(fs.FlagSet, &opts.DeadFilter, 0, "purge at most `n` dead letters, oldest first; 0 purges every match")
	fs.BoolVar(&opts.All, "all", false, "purge every dead letter when no filter is given")
	fs.BoolVar(&opts.DryRun, "dry-run", false, "count what would be purged, change nothing")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, pool, err := openAdmin(ctx, environ)
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := admin.PurgeDead(ctx, pool, c.Schema, opts)
	if err != nil {
		return noFilterAsUsage(err, "name dead letters with --id, --topic, --key, --reason, --error or --since, or pass --all to purge every one")
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

func cmdReplay(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("replay [--from T] [--to T] [--by delivered|created] [--topic T] [--key K] [--new-keys] [--all] [--dry-run]",
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
	c, pool, err := openAdmin(ctx, environ)
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := admin.Replay(ctx, pool, c.Schema, opts)
	if err != nil {
		return noFilterAsUsage(err, "select archived rows with --from, --to, --topic or --key, or pass --all to replay the whole archive")
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
		fmt.Fprintf(w, "%s matched; %s were delivered more than once and are replayed once, from the latest delivery\n",
			plural(res.Matched, "archived row"), plural(res.Matched-res.Events, "repeat"))
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

func cmdCancel(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("cancel (--key K | --topic T) [--dry-run]",
		"Move pending rows of an ordering key or a topic to the dead letters (reason cancelled), so that they are\n"+
			"not delivered. Rows in flight (under a running lease) are left alone: a relay may be delivering them.\n"+
			"Undo with `outbox-relay dead retry --reason cancelled` and the same --key or --topic.", stderr)
	var opts admin.CancelOptions
	fs.StringVar(&opts.Key, "key", "", "ordering `key`, exactly")
	fs.StringVar(&opts.Topic, "topic", "", "`topic`, exactly, or a LIKE pattern when it contains % (orders.%); with --key both must match")
	fs.BoolVar(&opts.DryRun, "dry-run", false, "count what would be cancelled, change nothing")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if opts.Key == "" && opts.Topic == "" {
		return usageError{errors.New("name the rows to cancel with --key or --topic")}
	}
	c, pool, err := openAdmin(ctx, environ)
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := admin.Cancel(ctx, pool, c.Schema, opts)
	if err != nil {
		return noFilterAsUsage(err, "name the rows to cancel with --key or --topic")
	}
	if res.Matched == 0 {
		fmt.Fprintln(stdout, "no pending rows match")
		return nil
	}
	if res.DryRun {
		fmt.Fprintf(stdout, "would cancel %s (dry run)\n", plural(res.Cancelled, "pending row"))
	} else {
		fmt.Fprintf(stdout, "cancelled %s (moved to the dead letters with reason %s)\n", plural(res.Cancelled, "pending row"), relay.ReasonCancelled)
	}
	if res.InFlight > 0 {
		verb := "left"
		if res.DryRun {
			verb = "would leave"
		}
		fmt.Fprintf(stdout, "%s alone %s in flight: a relay may be delivering it right now; run cancel again once\n"+
			"  the lease ends (RELAY_LEASE); a row delivered meanwhile is in the archive instead\n",
			verb, plural(res.InFlight, "row"))
	}
	return nil
}

// noFilterAsUsage turns admin.ErrNoFilter into a usage error with advice.
func noFilterAsUsage(err error, advice string) error {
	if errors.Is(err, admin.ErrNoFilter) {
		return usageError{fmt.Errorf("no filter given: %s", advice)}
	}
	return err
}

// timeFlag is a flag.Value for a point in time: RFC 3339, or a duration
// meaning that long ago.
type timeFlag time.Time

func (t *timeFlag) String() string {
	if t == nil || time.Time(*t).IsZero() {
		return ""
	}
	return time.Time(*t).Format(time.RFC3339)
}

func (t *timeFlag) Set(s string) error {
	if v, err := time.Parse(time.RFC3339Nano, s); err == nil {
		*t = timeFlag(v)
		return nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		*t = timeFlag(time.Now().Add(-d))
		return nil
	}
	return errors.New("want an RFC 3339 time like 2026-01-02T15:04:05Z or a duration ago like 24h")
}

// idsFlag is a flag.Value collecting ids from repeated flags and commas.
type idsFlag []int64

func (ids *idsFlag) String() string {
	if ids == nil {
		return ""
	}
	return joinIDs(*ids, len(*ids))
}

func (ids *idsFlag) Set(s string) error {
	for part := range strings.SplitSeq(s, ",") {
		id, err := strconv.ParseInt(strings.TrimSpace(part), 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an id", part)
		}
		*ids = append(*ids, id)
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

// plural returns "1 thing" or "n things".
func plural(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.FormatInt(n, 10) + " " + thing + "s"
}

// joinIDs lists up to max ids, separated by commas.
func joinIDs(ids []int64, limit int) string {
	var b strings.Builder
	for i, id := range ids {
		if i == limit {
			fmt.Fprintf(&b, ", … (%d more)", len(ids)-limit)
			break
		}
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	return b.String()
}

// oneLine shortens s to at most n runes on one line, for a table cell.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// formatAge rounds d to what an operator reads at a glance.
func formatAge(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return d.Round(time.Minute).String()
	}
}

// relTime says when t is relative to now: "in 5s", "3m0s ago", or "-".
func relTime(t *time.Time, now time.Time) string {
	return relTimeOr(t, now, "-")
}

func relTimeOr(t *time.Time, now time.Time, none string) string {
	if t == nil || t.IsZero() {
		return none
	}
	if d := t.Sub(now); d >= 0 {
		return "in " + formatAge(d)
	}
	return formatAge(now.Sub(*t)) + " ago"
}

// formatBytes prints n in binary units, as pg_size_pretty does.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(n)/float64(div), "kMGTP"[exp])
}
