package admin

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/internal/horizon"
)

// Defaults for StatusOptions.
const (
	DefaultSinkLabel   = "(default)"
	TopErrorsDefault   = 5
	BlockedKeysDefault = 10
)

// horizonHoldersListed is how many holders of the xmin horizon Status
// lists.
const horizonHoldersListed = 5

// deliveredMinutes is how many minutes DeliveredPerMinute covers.
const deliveredMinutes = 5

// relayAliveFor is how recently a relay must have been seen to count as
// alive: three of its heartbeats (every 10 seconds).
const relayAliveFor = 30 * time.Second

// StatusOptions configures Status. Zero values take the documented defaults.
type StatusOptions struct {
	// DefaultSink names the destination of rows whose destination is null
	// (RELAY_SINK). Default DefaultSinkLabel.
	DefaultSink string
	// TopErrors is how many of the most frequent dead-letter errors to
	// return. Default TopErrorsDefault.
	TopErrors int
	// BlockedKeys is how many blocked keys (ordered mode) to list.
	// Default BlockedKeysDefault.
	BlockedKeys int
	// ExactCounts counts the archive and delivered_keys rows with full
	// scans. By default their row counts are the statistics system's
	// running estimates (n_live_tup), which cost nothing however large the
	// tables grow.
	ExactCounts bool
}

// StatusReport is a snapshot of the relay's tables, read in one
// transaction.
type StatusReport struct {
	// At is the database's clock when the snapshot was taken; ages are
	// measured from it.
	At time.Time `json:"at"`
	// Mode is the delivery mode of the schema's relays (unordered,
	// ordered, partitioned), ModeChangedAt when it was last switched and by which relay.
	Mode          outbox.Mode `json:"mode"`
	ModeChangedAt time.Time   `json:"mode_changed_at"`
	ModeChangedBy string      `json:"mode_changed_by,omitempty"`
	// Relays lists the relays registered on the schema, alive ones first.
	Relays []RelayStatus `json:"relays"`
	// BlockedKeys lists, in ordered mode, the keys held up by a failing
	// head, oldest head first.
	BlockedKeys []BlockedKey `json:"blocked_keys"`
	// Buckets lists, in partitioned mode, which relay holds which buckets,
	// with the backlog of each relay's buckets; the buckets nobody holds
	// come last, under an empty relay id.
	Buckets []BucketOwner `json:"buckets"`
	// BackoffByError groups the rows waiting for a retry by their last
	// error, the most frequent first: why rows are not moving.
	BackoffByError []BackoffGroup `json:"backoff_by_error"`
	// DeliveredPerMinute counts the rows archived in each of the last
	// minutes, oldest first: how fast the relays move now.
	DeliveredPerMinute []MinuteCount `json:"delivered_per_minute"`
	// Destinations summarises the hot table per destination, null shown as
	// StatusOptions.DefaultSink.
	Destinations []DestinationStatus `json:"destinations"`
	// Leases lists the relays holding rows in flight.
	Leases      []LeaseStatus    `json:"leases"`
	DeadLetters DeadLetterStatus `json:"dead_letters"`
	// Tables holds the size and vacuum statistics of messages, archive,
	// delivered_keys and dead_letters, in that order.
	Tables []TableStatus `json:"tables"`
	// Generations lists the hot table's generations by slot: messages is
	// the current one (operations.md, Hot table generations).
	Generations []GenerationStatus `json:"generations"`
	// Horizon says what holds back vacuum in the database.
	Horizon HorizonStatus `json:"horizon"`
}

// HorizonStatus lists the oldest holders of the database's xmin horizon:
// the transactions (and replication slots) whose snapshot keeps VACUUM from
// removing the dead rows every delivery leaves in messages, which pile up
// on the claims' path while the oldest lasts.
type HorizonStatus struct {
	// Holders are the oldest few, oldest xmin first.
	Holders []HorizonHolder `json:"holders"`
	// SeesAllSessions is false when the reading role lacks
	// pg_read_all_stats: PostgreSQL then hides when other roles'
	// transactions started, their state and their backend type.
	SeesAllSessions bool `json:"sees_all_sessions"`
}

// HorizonHolder is a transaction or a replication slot holding the xmin
// horizon.
type HorizonHolder struct {
	// Holder is session, prepared (a prepared transaction) or replication
	// (a replication slot's xmin, a standby's hot_standby_feedback).
	Holder string `json:"holder"`
	// PID is the backend's (a slot's active walsender's); nil for a
	// prepared transaction.
	PID *int32 `json:"pid,omitempty"`
	// Name is a prepared transaction's gid or a slot's name.
	Name            string `json:"name,omitempty"`
	User            string `json:"user,omitempty"`
	ApplicationName string `json:"application_name,omitempty"`
	State           string `json:"state,omitempty"`
	// AgeSeconds is the time since its transaction started (since its
	// PREPARE for a prepared one); nil where PostgreSQL does not say (a
	// slot, or another role's session without pg_read_all_stats).
	AgeSeconds *float64 `json:"age_seconds,omitempty"`
	// AgeTransactions is the age of its xmin or transaction id.
	AgeTransactions int64 `json:"age_transactions"`
}

// Oldest returns the holder whose transaction started longest ago among
// those whose start is known, or nil.
func (h *HorizonStatus) Oldest() *HorizonHolder {
	var oldest *HorizonHolder
	for i := range h.Holders {
		x := &h.Holders[i]
		if x.AgeSeconds != nil && (oldest == nil || *x.AgeSeconds > *oldest.AgeSeconds) {
			oldest = x
		}
	}
	return oldest
}

// DestinationStatus counts the rows of one destination in the hot table.
// Due, InFlight, Backoff and Delayed use the relay's definitions: a row is in
// flight while its lease runs; due when available_at has come and no lease
// runs; in backoff when it failed and waits for its retry; delayed when it
// was never tried and waits for its available_at.
type DestinationStatus struct {
	Destination string `json:"destination" db:"destination"`
	// Pending is every row of the destination in the hot table.
	Pending int64 `json:"pending" db:"pending"`
	// Due is the backlog: rows a relay may claim now.
	Due int64 `json:"due" db:"due"`
	// OldestDueAt is the available_at of the oldest due row, and
	// OldestDueAgeSeconds how long ago that was (0 without due rows).
	OldestDueAt         *time.Time `json:"oldest_due_at,omitempty" db:"oldest_due_at"`
	OldestDueAgeSeconds float64    `json:"oldest_due_age_seconds" db:"-"`
	InFlight            int64      `json:"in_flight" db:"in_flight"`
	Backoff             int64      `json:"backoff" db:"backoff"`
	// NextRetryAt is the earliest retry among rows in backoff.
	NextRetryAt *time.Time `json:"next_retry_at,omitempty" db:"next_retry_at"`
	Delayed     int64      `json:"delayed" db:"delayed"`
	// NextDelayedAt is the earliest available_at among delayed rows.
	NextDelayedAt *time.Time `json:"next_delayed_at,omitempty" db:"next_delayed_at"`
	// Waiting counts, in ordered mode, the rows that wait for an older row
	// of their key (not due, whatever their available_at).
	Waiting int64 `json:"waiting" db:"waiting"`
}

// BackoffGroup counts the rows in backoff that failed with one error.
type BackoffGroup struct {
	Error string `json:"error" db:"error"`
	Count int64  `json:"count" db:"count"`
	// NextRetryAt is the earliest retry among them.
	NextRetryAt time.Time `json:"next_retry_at" db:"next_retry_at"`
}

// MinuteCount is what the relays archived in one minute.
type MinuteCount struct {
	Minute       time.Time `json:"minute" db:"minute"`
	Delivered    int64     `json:"delivered" db:"delivered"`
	Deduplicated int64     `json:"deduplicated" db:"deduplicated"`
}

// RelayStatus is a relay registered on the schema.
type RelayStatus struct {
	ID        string      `json:"id" db:"id"`
	Version   string      `json:"version" db:"version"`
	Mode      outbox.Mode `json:"mode" db:"mode"`
	StartedAt time.Time   `json:"started_at" db:"started_at"`
	LastSeen  time.Time   `json:"last_seen" db:"last_seen"`
	// Alive is set when the relay was seen within 30 seconds (it records a
	// heartbeat every 10).
	Alive bool `json:"alive" db:"alive"`
	// ClaimFloorLagSeconds is how far below now the relay's claim floor
	// lay at its last heartbeat (outbox_relay_claim_floor_lag_seconds):
	// under a second while claims keep up; more while a due row waits
	// unclaimed or a young transaction is in progress. Nil before the
	// relay's first floor refresh.
	ClaimFloorLagSeconds *float64 `json:"claim_floor_lag_seconds,omitempty" db:"claim_floor_lag"`
}

// BlockedKey is a key whose head (its oldest row) failed and holds up the
// key's other rows (ordered mode).
type BlockedKey struct {
	Key string `json:"key" db:"key"`
	// HeadCreatedAt is when the head was written.
	HeadCreatedAt time.Time `json:"head_created_at" db:"head_created_at"`
	Attempts      int       `json:"attempts" db:"attempts"`
	// NextAttemptAt is when the head is retried; InFlight is set while a
	// retry is under way.
	NextAttemptAt time.Time `json:"next_attempt_at" db:"next_attempt_at"`
	InFlight      bool      `json:"in_flight" db:"in_flight"`
	LastError     string    `json:"last_error" db:"last_error"`
	// Rows counts the key's rows, the head included.
	Rows int64 `json:"rows" db:"rows"`
}

// BucketOwner is a relay's share of the buckets in partitioned mode.
type BucketOwner struct {
	// RelayID holds the buckets; empty for buckets nobody holds.
	RelayID string  `json:"relay_id" db:"relay_id"`
	Buckets []int32 `json:"buckets" db:"buckets"`
	// Epoch is the newest epoch (fencing token) among them.
	Epoch int64 `json:"epoch" db:"epoch"`
	// LeaseUntil is when the earliest of the relay's bucket leases ends
	// unless renewed; LastSeen its last heartbeat.
	LeaseUntil *time.Time `json:"lease_until,omitempty" db:"lease_until"`
	LastSeen   *time.Time `json:"last_seen,omitempty" db:"last_seen"`
	// Due and InFlight count the rows of its buckets that are due, and in
	// flight: the backlog of each relay.
	Due      int64 `json:"due" db:"due"`
	InFlight int64 `json:"in_flight" db:"in_flight"`
}

// LeaseStatus counts the rows one relay holds in flight.
type LeaseStatus struct {
	// RelayID is the relay's leased_by (RELAY_ID).
	RelayID string `json:"relay_id" db:"relay_id"`
	Rows    int64  `json:"rows" db:"rows"`
	// EarliestLeaseEnd and LatestLeaseEnd bound its leases' ends: a relay
	// whose leases all end in the past has stopped settling.
	EarliestLeaseEnd time.Time `json:"earliest_lease_end" db:"earliest_lease_end"`
	LatestLeaseEnd   time.Time `json:"latest_lease_end" db:"latest_lease_end"`
}

// DeadLetterStatus summarises the dead letters.
type DeadLetterStatus struct {
	Total    int64        `json:"total"`
	ByReason []CountSince `json:"by_reason"`
	// TopErrors are the most frequent error texts, most frequent first.
	TopErrors []CountSince `json:"top_errors"`
}

// CountSince counts the dead letters with one reason or error text.
type CountSince struct {
	// Value is the reason or the error text.
	Value string `json:"value" db:"value"`
	Count int64  `json:"count" db:"count"`
	// LastFailedAt is the latest failed_at among them.
	LastFailedAt time.Time `json:"last_failed_at" db:"last_failed_at"`
}

// TableStatus describes one of the relay's tables.
type TableStatus struct {
	Table string `json:"table" db:"table"`
	// Rows is the row count: exact for messages and dead_letters (and for
	// the others with ExactCounts), otherwise the running estimate
	// n_live_tup; RowsExact says which.
	Rows      int64 `json:"rows" db:"-"`
	RowsExact bool  `json:"rows_exact" db:"-"`
	// TotalBytes is pg_total_relation_size: heap, indexes and TOAST.
	TotalBytes int64 `json:"total_bytes" db:"total_bytes"`
	// LiveTuples and DeadTuples are pg_stat_user_tables' estimates; many
	// dead tuples in messages mean vacuum is falling behind.
	LiveTuples     int64      `json:"live_tuples" db:"live_tuples"`
	DeadTuples     int64      `json:"dead_tuples" db:"dead_tuples"`
	LastVacuum     *time.Time `json:"last_vacuum,omitempty" db:"last_vacuum"`
	LastAutovacuum *time.Time `json:"last_autovacuum,omitempty" db:"last_autovacuum"`
}

// GenerationStatus describes one generation of the hot table.
type GenerationStatus struct {
	Slot       int    `json:"slot" db:"slot"`
	Generation int64  `json:"generation" db:"generation"`
	State      string `json:"state" db:"state"` // current, draining or spare
	Table      string `json:"table" db:"table_name"`
	// Since is when the slot took its state.
	Since time.Time `json:"since" db:"since"`
	// Attached is whether messages_all reads it (an empty spare is not).
	Attached bool `json:"attached" db:"attached"`
	// LiveRows and DeadRows are the statistics' estimates.
	LiveRows   int64 `json:"live_rows" db:"live_rows"`
	DeadRows   int64 `json:"dead_rows" db:"dead_rows"`
	TotalBytes int64 `json:"total_bytes" db:"total_bytes"`
}

// Total returns the sum over every destination; its Destination is empty.
func (s *StatusReport) Total() DestinationStatus {
	var t DestinationStatus
	for _, d := range s.Destinations {
		t.Pending += d.Pending
		t.Due += d.Due
		t.InFlight += d.InFlight
		t.Backoff += d.Backoff
		t.Delayed += d.Delayed
		t.Waiting += d.Waiting
		t.OldestDueAt = earliest(t.OldestDueAt, d.OldestDueAt)
		t.NextRetryAt = earliest(t.NextRetryAt, d.NextRetryAt)
		t.NextDelayedAt = earliest(t.NextDelayedAt, d.NextDelayedAt)
		t.OldestDueAgeSeconds = max(t.OldestDueAgeSeconds, d.OldestDueAgeSeconds)
	}
	return t
}

// earliest returns the earlier of a and b; nil only when both are.
func earliest(a, b *time.Time) *time.Time {
	if a == nil || (b != nil && b.Before(*a)) {
		return b
	}
	return a
}

// schemaMode is what queryRelayMode reads.
type schemaMode struct {
	At        time.Time   `db:"at"`
	Mode      outbox.Mode `db:"mode"`
	ChangedAt time.Time   `db:"changed_at"`
	ChangedBy string      `db:"changed_by"`
}

// exactCounts is what queryArchiveCountExact reads.
type exactCounts struct {
	Archive       int64 `db:"archive_rows"`
	DeliveredKeys int64 `db:"delivered_keys_rows"`
}

// deadLettersGroup is a row of queryDeadLettersSummary: the dead letters of
// one reason (ByReason) or of one error text.
type deadLettersGroup struct {
	ByReason bool `db:"by_reason"`
	CountSince
}

// splitDeadSummary splits the rows of queryDeadLettersSummary into the
// reasons, most numerous first (then by name), and the top most frequent
// errors (then the latest failure first).
func splitDeadSummary(rows []deadLettersGroup, top int) (byReason, topErrors []CountSince) {
	byReason, topErrors = []CountSince{}, []CountSince{}
	for _, r := range rows {
		if r.ByReason {
			byReason = append(byReason, r.CountSince)
		} else {
			topErrors = append(topErrors, r.CountSince)
		}
	}
	slices.SortFunc(byReason, func(a, b CountSince) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Value, b.Value))
	})
	slices.SortFunc(topErrors, func(a, b CountSince) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), b.LastFailedAt.Compare(a.LastFailedAt))
	})
	return byReason, topErrors[:min(top, len(topErrors))]
}

// collect queues q on b with args and has the rows it returns, collected
// by name, appended to *into; what names them in the error.
func collect[T any](b *pgx.Batch, into *[]T, what, q string, args ...any) {
	b.Queue(q, args...).Query(func(rows pgx.Rows) error {
		got, err := pgx.AppendRows(*into, rows, pgx.RowToStructByName[T])
		if err != nil {
			return fmt.Errorf("read %s: %w", what, err)
		}
		*into = got
		return nil
	})
}

// Status reads a snapshot of the relay's tables in schema: a handful of
// queries in one read-only transaction, the schema's mode first and the
// rest in one round trip. The hot table and the dead letters are scanned;
// the archive and delivered_keys are not, unless opts.ExactCounts.
func (a *Admin) Status(ctx context.Context, opts StatusOptions) (*StatusReport, error) {
	opts.DefaultSink = cmp.Or(opts.DefaultSink, DefaultSinkLabel)
	if opts.TopErrors <= 0 {
		opts.TopErrors = TopErrorsDefault
	}
	if opts.BlockedKeys <= 0 {
		opts.BlockedKeys = BlockedKeysDefault
	}
	st := &StatusReport{Destinations: []DestinationStatus{}, Leases: []LeaseStatus{}, Tables: []TableStatus{}, Generations: []GenerationStatus{},
		Relays: []RelayStatus{}, BlockedKeys: []BlockedKey{}, Buckets: []BucketOwner{}, BackoffByError: []BackoffGroup{}, DeliveredPerMinute: []MinuteCount{},
		DeadLetters: DeadLetterStatus{ByReason: []CountSince{}, TopErrors: []CountSince{}}}
	var holders horizon.Oldest
	var exact *exactCounts
	var deadSummary []deadLettersGroup
	err := inTx(ctx, a.db, readOnly, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, a.q.relayMode)
		mode, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[schemaMode])
		if err != nil {
			return fmt.Errorf("read the schema's mode: %w", err)
		}
		st.At, st.Mode, st.ModeChangedAt, st.ModeChangedBy = mode.At, mode.Mode, mode.ChangedAt, mode.ChangedBy
		ordered := st.Mode == outbox.ModeOrdered
		b := &pgx.Batch{}
		collect(b, &st.Relays, "relays", a.q.relaysStatus, pgx.StrictNamedArgs{"alive": relayAliveFor})
		collect(b, &st.BackoffByError, "backoff by error", a.q.backoffByError, pgx.StrictNamedArgs{"limit": opts.TopErrors})
		collect(b, &st.DeliveredPerMinute, "deliveries per minute", a.q.deliveredPerMinute, pgx.StrictNamedArgs{"minutes": deliveredMinutes})
		if ordered {
			collect(b, &st.BlockedKeys, "blocked keys", a.q.blockedKeys, pgx.StrictNamedArgs{"limit": opts.BlockedKeys})
		}
		if st.Mode == outbox.ModePartitioned {
			collect(b, &st.Buckets, "bucket owners", a.q.bucketOwners)
		}
		collect(b, &st.Destinations, "hot table summary", a.q.messagesStatus,
			pgx.StrictNamedArgs{"default_sink": opts.DefaultSink, "ordered": ordered})
		collect(b, &st.Leases, "leases", a.q.messagesLeases)
		collect(b, &deadSummary, "dead letters by reason and error", a.q.deadLettersSummary)
		collect(b, &st.Tables, "table statistics", a.q.tablesStatus, pgx.StrictNamedArgs{"schema_name": a.schema})
		collect(b, &st.Generations, "the hot table's generations", a.q.generations)
		horizon.QueueOldest(b, horizonHoldersListed, &holders)
		if opts.ExactCounts {
			b.Queue(a.q.archiveCountExact).Query(func(rows pgx.Rows) error {
				c, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[exactCounts])
				if err != nil {
					return fmt.Errorf("count the archive: %w", err)
				}
				exact = c
				return nil
			})
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("read status: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	st.DeadLetters.ByReason, st.DeadLetters.TopErrors = splitDeadSummary(deadSummary, opts.TopErrors)
	for _, c := range st.DeadLetters.ByReason {
		st.DeadLetters.Total += c.Count
	}
	total := st.Total()
	for i := range st.Tables {
		t := &st.Tables[i]
		t.Rows = t.LiveTuples
		switch {
		case t.Table == "messages":
			t.Rows, t.RowsExact = total.Pending, true
		case t.Table == "dead_letters":
			t.Rows, t.RowsExact = st.DeadLetters.Total, true
		case t.Table == "archive" && exact != nil:
			t.Rows, t.RowsExact = exact.Archive, true
		case t.Table == "delivered_keys" && exact != nil:
			t.Rows, t.RowsExact = exact.DeliveredKeys, true
		}
	}
	dueAges(st.At, st.Destinations)
	st.Horizon = horizonStatus(holders)
	return st, nil
}

// dueAges sets each destination's OldestDueAgeSeconds: how long before at
// its oldest due row became due.
func dueAges(at time.Time, ds []DestinationStatus) {
	for i := range ds {
		d := &ds[i]
		if d.OldestDueAt != nil {
			d.OldestDueAgeSeconds = max(0, at.Sub(*d.OldestDueAt).Seconds())
		}
	}
}

// Horizon lists the oldest holders of the xmin horizon of the database
// (of every schema in it, not only this one's), as Status does: the
// transactions and replication slots that keep vacuum from removing dead
// rows, oldest xmin first. It reads them in a read-only transaction of its
// own, whose snapshot is not among them.
func (a *Admin) Horizon(ctx context.Context) (HorizonStatus, error) {
	var o horizon.Oldest
	err := inTx(ctx, a.db, readOnly, func(tx pgx.Tx) error {
		var err error
		o, err = horizon.ReadOldest(ctx, tx, horizonHoldersListed)
		return err
	})
	if err != nil {
		return HorizonStatus{Holders: []HorizonHolder{}}, err
	}
	return horizonStatus(o), nil
}

// horizonStatus is the listing of the horizon's holders that Status
// reports.
func horizonStatus(o horizon.Oldest) HorizonStatus {
	hs := HorizonStatus{Holders: make([]HorizonHolder, len(o.Holders)), SeesAllSessions: o.SeesAllSessions}
	for i, h := range o.Holders {
		hs.Holders[i] = HorizonHolder{Holder: h.Kind, PID: h.PID, Name: h.Name, User: h.User, ApplicationName: h.ApplicationName,
			State: h.State, AgeSeconds: h.AgeSeconds, AgeTransactions: h.AgeTransactions}
	}
	return hs
}
