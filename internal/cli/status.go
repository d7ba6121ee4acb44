package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/admin"
)

func cmdStatus(ctx context.Context, inv *Invocation, args []string) error {
	stdout, stderr := inv.Stdout, inv.Stderr
	fs := newFlagSet("status [--json] [--exact] [--top N] [--schema S] [--tenant T]",
		"Show the backlog per destination, the rows in flight per relay, rows in backoff and delayed,\n"+
			"dead letters by reason and by error, and the size and vacuum state of the relay's tables.\n"+
			"With several outboxes configured and no --schema, show one line per outbox instead (every tenant's\n"+
			"database, every schema a pattern matches now); it exits 1 after the lines when one cannot be read.\n"+
			"Reads the database only; works while no relay runs.", stderr)
	asJSON := fs.Bool("json", false, "print JSON (for scripts)")
	exact := fs.Bool("exact", false, "count the archive and delivered_keys exactly (full scans) instead of using estimates")
	top := admin.TopErrorsDefault
	fs.Var((*limitFlag)(&top), "top", "show the `n` most frequent dead-letter errors (0: the default)")
	var of outboxFlags
	of.add(fs, "show this outbox's `schema` in detail (default: RELAY_SCHEMA; with several outboxes and no --schema, one line per outbox)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, err := loadConfig(inv.Environ)
	if err != nil {
		return err
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
	opts := admin.StatusOptions{DefaultSink: defaultSinkName(&c), TopErrors: top, ExactCounts: *exact}
	if one == nil {
		return statusOverview(ctx, stdout, listOutboxes(ctx, ts, pools), pools, opts, c.TenantsFile != "", *asJSON)
	}
	a, err := pools.admin(ctx, *one)
	if err != nil {
		return err
	}
	st, err := a.Status(ctx, opts)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, st)
	}
	printStatus(stdout, *one, st)
	return nil
}

// outboxStatus is one line of status's overview, and one element of its
// --json: an outbox's status report, or why it could not be read; with no
// schema, a tenant's pattern that matched none, or whose database could
// not be searched.
type outboxStatus struct {
	Tenant string `json:"tenant,omitempty"`
	Schema string `json:"schema,omitempty"`
	// Match is the pattern that found the schema, or that found none.
	Match  string              `json:"match,omitempty"`
	Error  string              `json:"error,omitempty"`
	Status *admin.StatusReport `json:"status,omitempty"`
}

// statusOverview reads every outbox's status report and prints one line
// per outbox (with a TENANT column when tenants are named), or with asJSON
// the reports. An outbox that cannot be read gets a line that says why,
// and the command then fails once every line is printed.
func statusOverview(ctx context.Context, w io.Writer, found []foundOutbox, pools *adminPools, opts admin.StatusOptions, tenants, asJSON bool) error {
	lines := make([]outboxStatus, 0, len(found))
	failed := 0
	for _, o := range found {
		line := outboxStatus{Tenant: o.Tenant, Schema: o.Schema, Match: o.Match}
		err := o.Err
		if err == nil && o.Schema != "" {
			var a *admin.Admin
			if a, err = pools.admin(ctx, o.outboxRef); err == nil {
				line.Status, err = a.Status(ctx, opts)
			}
		}
		if err != nil {
			line.Error = err.Error()
			failed++
		}
		lines = append(lines, line)
	}
	if asJSON {
		if err := writeJSON(w, lines); err != nil {
			return err
		}
	} else {
		printOverview(w, lines, tenants)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d outboxes could not be read (their lines say why)", failed, len(lines))
	}
	return nil
}

// printOverview prints status's overview: one line per outbox.
func printOverview(w io.Writer, lines []outboxStatus, tenants bool) {
	tw := newTable(w)
	head := "SCHEMA\tMODE\tDUE\tOLDEST DUE\tIN BACKOFF\tDEAD LETTERS\tRELAYS ALIVE"
	if tenants {
		head = "TENANT\t" + head
	}
	fmt.Fprintln(tw, head)
	for _, l := range lines {
		if tenants {
			fmt.Fprintf(tw, "%s\t", l.Tenant)
		}
		schema := l.Schema
		if schema == "" {
			schema = "(matching " + l.Match + ")"
		}
		st := l.Status
		switch {
		case l.Error != "" && l.Schema == "":
			fmt.Fprintf(tw, "%s\tcannot search this database: %s\n", safe(schema), safe(oneLine(l.Error, 160)))
		case l.Error != "":
			fmt.Fprintf(tw, "%s\tcannot read it: %s\n", schema, safe(oneLine(l.Error, 160)))
		case st == nil:
			fmt.Fprintf(tw, "%s\tno schema matches yet (outbox-relay migrate --schema NAME creates one)\n", safe(schema))
		default:
			total := st.Total()
			oldest := "-"
			if total.OldestDueAt != nil {
				oldest = formatAge(time.Duration(total.OldestDueAgeSeconds * float64(time.Second)))
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%d\n", schema, st.Mode, total.Due, oldest, total.Backoff,
				st.DeadLetters.Total, aliveRelays(st))
		}
	}
	tw.Flush()
	pick := "--schema S"
	if tenants {
		pick = "--tenant T --schema S"
	}
	fmt.Fprintf(w, "\n`outbox-relay status %s` shows one outbox in detail\n", pick)
}

func printStatus(w io.Writer, o outboxRef, st *admin.StatusReport) {
	ordered := st.Mode == outbox.ModeOrdered
	of := ""
	if o.Tenant != "" {
		of = " of tenant " + o.Tenant
	}
	fmt.Fprintf(w, "Schema %s%s at %s, mode %s (since %s)\n\n", o.Schema, of, st.At.UTC().Format(time.RFC3339), st.Mode,
		relTimeOr(&st.ModeChangedAt, st.At, "-"))
	printRelays(w, st)
	fmt.Fprintln(w)
	if len(st.Destinations) == 0 {
		fmt.Fprintln(w, "Hot table: empty (nothing pending)")
	} else {
		tw := newTable(w)
		head := "DESTINATION\tPENDING\tDUE\tOLDEST DUE\tIN FLIGHT\tBACKOFF\tNEXT RETRY\tDELAYED\tNEXT DELAYED"
		if ordered {
			head += "\tWAITING ON KEY"
		}
		fmt.Fprintln(tw, head)
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
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t%s\t%d\t%s", safe(d.Destination), d.Pending, d.Due, oldest,
				d.InFlight, d.Backoff, relTime(d.NextRetryAt, st.At), d.Delayed, relTime(d.NextDelayedAt, st.At))
			if ordered {
				fmt.Fprintf(tw, "\t%d", d.Waiting)
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
	}

	printMovement(w, st)
	if len(st.BackoffByError) > 0 {
		fmt.Fprintln(w)
		tw := newTable(w)
		fmt.Fprintln(tw, "IN BACKOFF BY LAST ERROR\tROWS\tNEXT RETRY")
		for _, g := range st.BackoffByError {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", oneLine(safe(orDash(g.Error)), 80), g.Count, relTime(&g.NextRetryAt, st.At))
		}
		tw.Flush()
	}
	if ordered {
		printBlockedKeys(w, st)
	}
	if st.Mode == outbox.ModePartitioned {
		printBuckets(w, st)
	}

	fmt.Fprintln(w)
	if len(st.Leases) == 0 {
		fmt.Fprintln(w, "In flight: none")
	} else {
		tw := newTable(w)
		fmt.Fprintln(tw, "IN FLIGHT BY RELAY\tROWS\tEARLIEST LEASE END\tLATEST LEASE END")
		for _, l := range st.Leases {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", safe(l.RelayID), l.Rows, relTime(&l.EarliestLeaseEnd, st.At), relTime(&l.LatestLeaseEnd, st.At))
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
			fmt.Fprintf(tw, "%s\t%d\t%s\n", safe(r.Value), r.Count, relTime(&r.LastFailedAt, st.At))
		}
		tw.Flush()
		fmt.Fprintln(w)
		tw = newTable(w)
		fmt.Fprintln(tw, "TOP ERRORS\tCOUNT\tLAST FAILED")
		for _, e := range dl.TopErrors {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", oneLine(safe(e.Value), 80), e.Count, relTime(&e.LastFailedAt, st.At))
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
	if len(st.Generations) > 0 {
		fmt.Fprintln(w)
		tw = newTable(w)
		fmt.Fprintln(tw, "GENERATION\tSTATE\tTABLE\tSINCE\tLIVE TUPLES\tDEAD TUPLES\tSIZE")
		for _, g := range st.Generations {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\n", g.Generation, g.State, g.Table, relTime(&g.Since, st.At),
				g.LiveRows, g.DeadRows, formatBytes(g.TotalBytes))
		}
		tw.Flush()
	}
	printHorizon(w, st)
}

// snapshotPinnedAfter is the age from which status shows the oldest
// snapshot: a transaction that has held its snapshot this long is not a
// claim, a settle or an ordinary request.
const snapshotPinnedAfter = time.Minute

// printHorizon names the transactions holding back vacuum in the database
// when the oldest started more than snapshotPinnedAfter ago.
func printHorizon(w io.Writer, st *admin.StatusReport) {
	oldest := st.Horizon.Oldest()
	if oldest == nil || *oldest.AgeSeconds < snapshotPinnedAfter.Seconds() {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Oldest snapshot: %s old (%s): it holds back vacuum in this database, so every row delivered since stays on the claims' path and claims slow down until it ends\n",
		formatAge(time.Duration(*oldest.AgeSeconds*float64(time.Second))), oldest.Holder)
	tw := newTable(w)
	fmt.Fprintln(tw, "HOLDER\tPID\tNAME\tUSER\tAPPLICATION\tSTATE\tAGE\tXMIN AGE (XACTS)")
	hidden := false
	for _, h := range st.Horizon.Holders {
		age := "?"
		if h.AgeSeconds != nil {
			if *h.AgeSeconds < snapshotPinnedAfter.Seconds() {
				continue
			}
			age = formatAge(time.Duration(*h.AgeSeconds * float64(time.Second)))
		} else if h.Holder == "session" {
			hidden = true
		}
		pid := "-"
		if h.PID != nil {
			pid = strconv.Itoa(int(*h.PID))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", h.Holder, pid, oneLine(safe(orDash(h.Name)), 40), safe(orDash(h.User)),
			oneLine(safe(orDash(h.ApplicationName)), 40), orDash(h.State), age, h.AgeTransactions)
	}
	tw.Flush()
	if hidden && !st.Horizon.SeesAllSessions {
		fmt.Fprintln(w, "? PostgreSQL hides when other roles' transactions started from this role: grant it pg_read_all_stats (docs/security.md)")
	}
	fmt.Fprintln(w, "Hint: end it (COMMIT or ROLLBACK in its session, SELECT pg_terminate_backend(pid), COMMIT PREPARED or ROLLBACK PREPARED 'name'),")
	fmt.Fprintln(w, "then keep it from coming back: idle_in_transaction_session_timeout, a statement_timeout for reporting roles,")
	fmt.Fprintln(w, "reports on a replica (mind hot_standby_feedback). See docs/when-to-graduate.md, A pinned horizon.")
}

// printRelays lists the relays registered on the schema.
func printRelays(w io.Writer, st *admin.StatusReport) {
	alive := aliveRelays(st)
	if alive == 0 {
		fmt.Fprintln(w, "Relays: none alive (none has recorded a heartbeat in the last 30s)")
	} else {
		fmt.Fprintf(w, "Relays: %d alive\n", alive)
	}
	if len(st.Relays) == 0 {
		return
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "RELAY\tVERSION\tMODE\tSTARTED\tLAST SEEN\tALIVE\tCLAIM FLOOR LAG")
	for _, r := range st.Relays {
		lag := "-"
		if r.ClaimFloorLagSeconds != nil {
			lag = time.Duration(*r.ClaimFloorLagSeconds * float64(time.Second)).Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", safe(r.ID), safe(r.Version), r.Mode,
			relTime(&r.StartedAt, st.At), relTime(&r.LastSeen, st.At), yesNo(r.Alive), lag)
	}
	tw.Flush()
}

// aliveRelays counts the relays seen within the last 30 seconds.
func aliveRelays(st *admin.StatusReport) int {
	alive := 0
	for _, r := range st.Relays {
		if r.Alive {
			alive++
		}
	}
	return alive
}

// printBlockedKeys lists the keys held up by a failing head (ordered mode).
func printBlockedKeys(w io.Writer, st *admin.StatusReport) {
	fmt.Fprintln(w)
	if len(st.BlockedKeys) == 0 {
		fmt.Fprintln(w, "Blocked keys: none")
		return
	}
	fmt.Fprintln(w, "Blocked keys (a failing head holds up the rows of its key), oldest head first:")
	tw := newTable(w)
	fmt.Fprintln(tw, "KEY\tROWS\tHEAD AGE\tATTEMPTS\tNEXT ATTEMPT\tLAST ERROR")
	for _, k := range st.BlockedKeys {
		next := relTime(&k.NextAttemptAt, st.At)
		if k.InFlight {
			next = "in flight"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\n", oneLine(safe(k.Key), 40), k.Rows, formatAge(st.At.Sub(k.HeadCreatedAt)),
			k.Attempts, next, oneLine(safe(k.LastError), 60))
	}
	tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// printMovement shows what the relays archived in the last minutes.
func printMovement(w io.Writer, st *admin.StatusReport) {
	if len(st.DeliveredPerMinute) == 0 {
		return
	}
	var parts []string
	for _, m := range st.DeliveredPerMinute {
		p := strconv.FormatInt(m.Delivered, 10)
		if m.Deduplicated > 0 {
			p += fmt.Sprintf(" (+%d dup)", m.Deduplicated)
		}
		parts = append(parts, p)
	}
	fmt.Fprintf(w, "\nDelivered per minute, the last %d (oldest first, this one last): %s\n", len(parts), strings.Join(parts, ", "))
}

// printBuckets prints, in partitioned mode, who holds which buckets and the
// backlog of each relay's buckets.
func printBuckets(w io.Writer, st *admin.StatusReport) {
	fmt.Fprintln(w)
	tw := newTable(w)
	fmt.Fprintln(tw, "BUCKETS BY RELAY	COUNT	BUCKETS	EPOCH	LAST HEARTBEAT	LEASE ENDS	DUE	IN FLIGHT")
	for _, o := range st.Buckets {
		who := safe(o.RelayID)
		if o.RelayID == "" {
			who = "(nobody)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%d\t%d\n", who, len(o.Buckets), bucketRanges(o.Buckets), o.Epoch,
			relTime(o.LastSeen, st.At), relTime(o.LeaseUntil, st.At), o.Due, o.InFlight)
	}
	tw.Flush()
}

// bucketRanges writes sorted bucket numbers as ranges: 0-15,32,40-47.
func bucketRanges(buckets []int32) string {
	var b strings.Builder
	for i := 0; i < len(buckets); {
		j := i
		for j+1 < len(buckets) && buckets[j+1] == buckets[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d", buckets[i])
		if j > i {
			fmt.Fprintf(&b, "-%d", buckets[j])
		}
		i = j + 1
	}
	return b.String()
}
