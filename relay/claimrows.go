package relay

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/internal/floor"
	"github.com/outbox-relay/outbox-relay/relay/internal/keychain"
	"github.com/outbox-relay/outbox-relay/relay/internal/sampler"
	"github.com/outbox-relay/outbox-relay/sinks"
)

// The claim statements' side of the relay: what a claim takes and returns,
// and the claim runner that runs a mode's claim statement and reads its
// rows. The loop that calls the claims is claimloop.go.

// claimedRow is a row this relay leased, with what the claim learned about it.
type claimedRow struct {
	sinks.Message
	// sink is where the row goes: its destination, or the default sink.
	sink string
	// duplicate is set when the row's idempotency key was already delivered.
	duplicate bool
	// seq is the row's claim_seq after this claim: its settle must find it.
	seq int32
	// rescued is set when the row's previous lease expired unsettled.
	rescued bool
	// unreadable, when set, says why the relay could not read the row: it
	// is dead-lettered without being sent.
	unreadable string
	// bucket is the row's bucket (0 where rows are not claimed by bucket),
	// and epoch the epoch under which this relay owned it when it claimed
	// the row: the settle's fence.
	bucket int32
	epoch  int64
	// keyed is set when the row has a key, the empty one included (Key is
	// "" for a row without one too).
	keyed bool
	// after, when not 0, is the id of the row of this relay's that the
	// row, its key's first in the claim, follows (queryBucketsClaim); self
	// and prev are its link in its key's chain and the link it follows
	// (relay/internal/keychain; nil in the modes that keep no chains).
	after      int64
	self, prev *keychain.Link
	// dueAt is the row's available_at as the claim returned it: with ID,
	// its place in the claims' walk (claimCursor).
	dueAt pgtype.Timestamptz
}

// tag returns c's claimTag.
func (c *claimedRow) tag() claimTag {
	return claimTag{seq: c.seq, bucket: c.bucket, epoch: c.epoch, keyed: c.keyed, self: c.self, prev: c.prev}
}

// heldKey is a key a claim reports without claiming its rows: a key whose
// older row is elsewhere (in flight, backing off) until about until
// (queryBucketsClaim).
type heldKey struct {
	key   string
	until time.Time
}

// claimShutdownGrace is how long a claim under way may go on once shutdown
// begins.
const claimShutdownGrace = time.Second

// claimer is one claim loop: the claim it makes and what wakes it early
// from a pause. A mode says which loops run (mode.claimers).
type claimer struct {
	// what names the rows it claims, for logs; loops that claim the same
	// rows take turns and share what their claims found (claimPacer).
	what  string
	claim func(ctx context.Context, req claimRequest) ([]claimedRow, error)
	// wake, when set, ends a pause at once: a settle made rows claimable.
	wake <-chan struct{}
	// batch, when set, is the most rows per claim; else BatchSize.
	batch int
	// eagerPause, when set, is how long an empty claim waits, rather than
	// PollInterval, while a claim of the same rows (what), this loop's or
	// another's, found some within the last PollInterval
	// (claimLoops.eager); eagerPauses, when set, shortens that: the
	// eagerness lasts eagerPauses+1 of its pauses from the last rows
	// found.
	eagerPause  func() time.Duration
	eagerPauses int
	// follower marks a second loop of the same claim, there for speed:
	// while the relay backs off idle claims (IdlePollInterval), it waits
	// for another loop to find rows rather than poll too.
	follower bool
	// more, when set, reports whether the loop's last claim left due rows
	// behind although it took fewer rows than its limit (a claim over
	// buckets, each limited to its share): the loop then treats it as a
	// full batch, a backlog.
	more func() bool
}

// claimRequest is what one claim may take.
type claimRequest struct {
	// limit is the most rows.
	limit int
	// bytes is the most payload bytes, but for one row larger than that
	// when oversized (the relay holds no payload at all).
	bytes     int64
	oversized bool
	// closed are the sinks whose rows must not be claimed now.
	closed []string
	// stopping is closed once the relay's shutdown begins: a claim that
	// has not started by then, waiting for its turn, claims nothing.
	stopping <-chan struct{}
}

// claimRunner runs claim statements (a mode renders them) and reads the
// rows they lease: every mode claims through one.
type claimRunner struct {
	cfg     Config
	pool    *pgxpool.Pool
	log     *slog.Logger
	metrics *Metrics
	// plan is queryClaimPlan; sampler measures a claim every so often.
	plan    string
	floor   *floor.State
	sampler *sampler.Sampler
	// sizeHint follows how many rows the claims that found some read (the
	// last one's, or half the hint before it when that is more: one short
	// claim in a backlog does not shrink it, nor do the empty claims of
	// another loop): the next claim's batch is made for twice as many (at
	// most its limit), growing as it reads, not for its limit. A steady
	// stream's claims find a few dozen rows of their 1,000, and a batch
	// made for 1,000 rows (288 KB, cleared) cost 7% of the relay's CPU at
	// 10k rows/s, and its collector more.
	sizeHint atomic.Int64
}

// newClaimRunner returns the claim runner of a relay on schema cfg.Schema.
func newClaimRunner(cfg Config, pool *pgxpool.Pool, log *slog.Logger) *claimRunner {
	return &claimRunner{cfg: cfg, pool: pool, log: log, metrics: cfg.Metrics, plan: queryClaimPlan,
		sampler: sampler.New(sampler.Config{QuotedSchema: outbox.QuoteSchema(cfg.Schema), Hooks: sampler.Hooks{
			Measured: func(entries, buffers int64) {
				cfg.Metrics.ClaimIndexEntries.Observe(float64(entries))
				cfg.Metrics.ClaimBuffers.Observe(float64(buffers))
			},
		}})}
}

// claimFunc returns a claim that runs stmt, a rendering of
// queryMessagesClaim: it leases up to the request's limit of due rows
// whose sink is not closed, within its byte budget, walking from the claim
// floor, and returns them in insert order.
func (cr *claimRunner) claimFunc(stmt string) func(ctx context.Context, req claimRequest) ([]claimedRow, error) {
	return func(ctx context.Context, req claimRequest) ([]claimedRow, error) {
		batch, _, err := cr.runClaim(ctx, stmt, cr.messagesClaimArgs(req, nil), req, "claim batch")
		return batch, err
	}
}

// messagesClaimArgs returns the arguments of queryMessagesClaim for req:
// claimArgs', and where its walk starts (@after_at, @after_id): where
// cursor says (claimCursor.from), or at the claim floor when cursor is
// nil.
func (cr *claimRunner) messagesClaimArgs(req claimRequest, cursor *claimCursor) pgx.StrictNamedArgs {
	args := cr.claimArgs(req)
	floor := args["floor"].(pgtype.Timestamptz) // the floor @floor holds, read once
	args["after_at"], args["after_id"] = floor, int64(math.MinInt64)
	if cursor != nil {
		args["after_at"], args["after_id"] = cursor.from(floor, time.Now())
	}
	return args
}

// lastInWalk returns where batch, a claim's rows, ends in the order the
// claims walk the due index (available_at, id), for claimCursor: an
// infinite time when a row of it is due at one.
func lastInWalk(batch []claimedRow) (at pgtype.Timestamptz, id int64) {
	for i, r := range batch {
		if r.dueAt.InfinityModifier != pgtype.Finite || !r.dueAt.Valid {
			return r.dueAt, r.ID
		}
		if i == 0 || r.dueAt.Time.After(at.Time) || r.dueAt.Time.Equal(at.Time) && r.ID > id {
			at, id = r.dueAt, r.ID
		}
	}
	return at, id
}

// claimArgs returns the arguments every claim statement takes, for req.
func (cr *claimRunner) claimArgs(req claimRequest) pgx.StrictNamedArgs {
	return pgx.StrictNamedArgs{
		"relay_id":     cr.cfg.ID,
		"default_sink": cr.cfg.DefaultSink,
		"closed_sinks": req.closed,
		"limit":        req.limit,
		"lease":        cr.cfg.Lease,
		"byte_budget":  req.bytes,
		"oversized":    req.oversized,
		"payload_max":  cr.cfg.payloadMax(),
		"floor":        cr.floor.Current(),
	}
}

// runClaim runs the claim statement stmt with args for req and returns
// the rows it leased (read) and the keys it reports without claiming
// their rows, and records the claim (observe). Every claim
// walks its index in order (inIndexOrder); one every sampler.EveryDefault
// is measured as well (measured). Every error is reported once as
// what failed.
func (cr *claimRunner) runClaim(ctx context.Context, stmt string, args pgx.StrictNamedArgs, req claimRequest, what string) ([]claimedRow, []heldKey, error) {
	start := time.Now()
	var batch []claimedRow
	var held []heldKey
	var err error
	if cr.sampler.Due(start) {
		batch, held, err = cr.runMeasured(ctx, stmt, args, req)
	} else {
		batch, held, err = cr.inIndexOrder(ctx, stmt, args, req.limit)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	cr.observeClaim(start, batch)
	return batch, held, nil
}

// inIndexOrder runs the claim statement stmt in a transaction whose
// planner walks the indexes in order, with a generic plan made once per
// connection (queryClaimPlan), in one round trip
// (inPipeline), READ COMMITTED whatever the database's default: a claim's
// locks take the latest version of a row another transaction changed. The
// rows are returned only once the transaction committed: until then their
// leases are not taken.
//
// Every claim runs so, polls of an idle table too: the claim is a prepared
// statement of the connection, parsed once, where a
// statement run alone (planPerExecution) is parsed, analyzed and planned
// at every execution. Counted with callgrind on PostgreSQL 15 (make
// bench-instructions; the unordered claim, parse to commit): a poll of an
// empty table 1.40 million instructions alone, 0.53 million so; a claim of
// 10 rows past 20 leased ones 2.48 million alone, 1.65 million so
// (docs/benchmarks.md, "The claim and the settle, counted"; counted while
// each execution was still planned, which the generic plan saves too).
func (cr *claimRunner) inIndexOrder(ctx context.Context, stmt string, args pgx.StrictNamedArgs, limit int) (batch []claimedRow, held []heldKey, err error) {
	err = inPipeline(ctx, cr.pool, "BEGIN ISOLATION LEVEL READ COMMITTED", []pipelined{{sql: cr.plan}, {sql: stmt, args: args}}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		batch, held, err = cr.readClaimed(rows, limit)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return batch, held, nil
}

// claimColumns are the positions of a claim statement's columns, found by
// name (leaseRowsAlso's RETURNING, then held_key). A row whose id is NULL
// reports a key whose rows were not claimed (a key held back,
// queryBucketsClaim): held_key is the key, created_at, when set, when to
// look at it again.
type claimColumns struct {
	n                                                int
	id, topic, payload, key, headers, idempotencyKey int
	destination, createdAt, attempts, claimSeq       int
	rescued, duplicate, bucket, tooLarge, heldKey    int
	// after is -1 where the claim returns no such column (after: the
	// row of this relay's that a key's first row in the claim follows).
	after int
	// dueAt is -1 where the claim returns no due_at (the row's
	// available_at as the claim found it).
	dueAt int
}

// claimColumnsOf finds the claim's columns in fields.
func claimColumnsOf(fields []pgconn.FieldDescription) (claimColumns, error) {
	at := make(map[string]int, len(fields))
	for i, f := range fields {
		at[f.Name] = i
	}
	c := claimColumns{n: len(fields), after: -1, dueAt: -1}
	if i, ok := at["after"]; ok {
		c.after = i
	}
	if i, ok := at["due_at"]; ok {
		c.dueAt = i
	}
	for _, col := range []struct {
		name string
		to   *int
	}{
		{"id", &c.id}, {"topic", &c.topic}, {"payload", &c.payload}, {"key", &c.key}, {"headers", &c.headers},
		{"idempotency_key", &c.idempotencyKey}, {"destination", &c.destination}, {"created_at", &c.createdAt},
		{"attempts", &c.attempts}, {"claim_seq", &c.claimSeq}, {"rescued", &c.rescued}, {"duplicate", &c.duplicate},
		{"bucket", &c.bucket}, {"too_large", &c.tooLarge}, {"held_key", &c.heldKey},
	} {
		i, ok := at[col.name]
		if !ok {
			return c, fmt.Errorf("the claim statement returns no column %s", col.name)
		}
		*col.to = i
	}
	return c, nil
}

// readClaimed reads the rows of a claim statement, by column name
// (claimColumns): the rows it leased, and the keys it held back.
func (cr *claimRunner) readClaimed(rows pgx.Rows, limit int) (batch []claimedRow, held []heldKey, err error) {
	defer rows.Close()
	if len(rows.FieldDescriptions()) == 0 {
		// The statement failed before it described its rows: its error,
		// not a missing column, is the news.
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, nil, err
		}
	}
	cols, err := claimColumnsOf(rows.FieldDescriptions())
	if err != nil {
		return nil, nil, err
	}
	batch = make([]claimedRow, 0, min(limit, max(2*int(cr.sizeHint.Load()), 16)))
	// The scan's destinations live once for the whole claim, each row
	// read into them and copied out: values, not pointers, so that a row
	// costs the allocations of its own strings and bytes alone, not one
	// per column (a fifth of the relay's CPU in a drain was this loop).
	var (
		c                               claimedRow
		key, destination                pgtype.Text
		topic, idempotencyKey, tooLarge pgtype.Text
		headers                         []byte
		createdAt, dueAt                pgtype.Timestamptz
		after                           pgtype.Int8
	)
	dest := make([]any, cols.n)
	dest[cols.id], dest[cols.topic], dest[cols.payload], dest[cols.key] = &c.ID, &topic, &c.Payload, &key
	dest[cols.headers], dest[cols.idempotencyKey], dest[cols.destination] = &headers, &idempotencyKey, &destination
	dest[cols.createdAt], dest[cols.attempts], dest[cols.claimSeq] = &createdAt, &c.Attempt, &c.seq
	dest[cols.rescued], dest[cols.duplicate], dest[cols.bucket] = &c.rescued, &c.duplicate, &c.bucket
	dest[cols.tooLarge] = &tooLarge // held_key (nil: skipped) is read only of held rows, below
	if cols.after >= 0 {
		dest[cols.after] = &after
	}
	if cols.dueAt >= 0 {
		dest[cols.dueAt] = &dueAt
	}
	for rows.Next() {
		if raw := rows.RawValues(); raw[cols.id] == nil {
			h := heldKey{key: string(raw[cols.heldKey])}
			if raw[cols.createdAt] != nil {
				var until pgtype.Timestamptz
				only := make([]any, cols.n)
				only[cols.createdAt] = &until
				if err := rows.Scan(only...); err == nil {
					h.until = finite(until)
				}
			}
			held = append(held, h)
			continue
		}
		c, headers = claimedRow{}, nil
		// Reset too: a scan that fails part way leaves the columns after
		// the failing one as the previous row had them.
		key, destination, topic, idempotencyKey, tooLarge = pgtype.Text{}, pgtype.Text{}, pgtype.Text{}, pgtype.Text{}, pgtype.Text{}
		createdAt, dueAt, after = pgtype.Timestamptz{}, pgtype.Timestamptz{}, pgtype.Int8{}
		err := rows.Scan(dest...)
		if err == nil && !tooLarge.Valid {
			c.Topic, c.IdempotencyKey = topic.String, idempotencyKey.String
			c.Headers, err = parseHeaders(headers)
		}
		switch {
		case err == nil && tooLarge.Valid:
			// A part larger than the relay reads: the claim left it
			// unread, and the row goes to the dead letters alone.
			// The parts within their limits were read (a key keeps its
			// order's bookkeeping).
			c.unreadable = tooLargeReason(cr.cfg, tooLarge.String)
			c.Topic, c.IdempotencyKey = topic.String, idempotencyKey.String
		case err != nil:
			// One row the relay cannot read must not stop the others: it
			// is dead-lettered with the reason, the batch goes on.
			if !readIDAndSeq(rows, cols, &c) {
				return nil, nil, fmt.Errorf("read row: %w", err)
			}
			c.unreadable = "the relay cannot read this row: " + err.Error()
		}
		c.CreatedAt = finite(createdAt)
		c.dueAt = dueAt
		if after.Valid {
			c.after = after.Int64
		}
		if key.Valid {
			c.Key, c.keyed = key.String, true
		}
		c.sink = cr.cfg.DefaultSink
		if destination.Valid {
			c.Destination = destination.String
			c.sink = destination.String
			if _, ok := cr.cfg.Sinks[c.sink]; !ok {
				c.sink = unknownSink
			}
		}
		batch = append(batch, c)
	}
	if err := rows.Err(); err != nil {
		// The claim may have committed before the connection failed; rows
		// leased then come back when the lease expires.
		return nil, nil, err
	}
	if len(batch) > 0 {
		cr.sizeHint.Store(max(int64(len(batch)), cr.sizeHint.Load()/2))
	}
	slices.SortFunc(batch, func(a, b claimedRow) int { return cmp.Compare(a.ID, b.ID) })
	return batch, held, nil
}

// tooLargeReason says why a row whose part too_large names ("topic 4100":
// the part and its size in bytes) was not read, naming the limit.
func tooLargeReason(cfg Config, tooLarge string) string {
	part, size, _ := strings.Cut(tooLarge, " ")
	n, _ := strconv.ParseInt(size, 10, 64)
	e := &sinks.LimitError{What: part, Size: n, Limit: "the relay's limit on a row's " + part, Max: rowPartLimit(part)}
	if part == "payload" {
		e.Limit, e.Max = "RELAY_MAX_IN_FLIGHT_BYTES", cfg.MaxInFlightBytes
		if cfg.payloadMax() < cfg.MaxInFlightBytes {
			e.Limit, e.Max = "RELAY_MAX_PAYLOAD_BYTES", cfg.MaxPayloadBytes
		}
	}
	return "the relay does not read this row: " + e.Error()
}

// payloadMax is the most payload bytes a claim reads of a row: the
// in-flight byte budget, or RELAY_MAX_PAYLOAD_BYTES when lower.
func (c Config) payloadMax() int64 {
	if m := c.MaxPayloadBytes; m > 0 && m < c.MaxInFlightBytes {
		return m
	}
	return c.MaxInFlightBytes
}

// rowPartLimit returns the most bytes a claim reads of a row's part other
// than its payload (outbox/limits.go).
func rowPartLimit(part string) int64 {
	switch part {
	case "topic":
		return outbox.TopicBytesMax
	case "key":
		return outbox.KeyBytesMax
	case "idempotency_key":
		return outbox.IdempotencyKeyBytesMax
	case "destination":
		return outbox.DestinationBytesMax
	default:
		return outbox.HeadersBytesMax
	}
}

// readIDAndSeq reads the id and claim_seq of the current row alone, for a
// row whose other columns could not be read.
func readIDAndSeq(rows pgx.Rows, cols claimColumns, c *claimedRow) bool {
	raw, fields := rows.RawValues(), rows.FieldDescriptions()
	m := rows.Conn().TypeMap()
	id, seq := cols.id, cols.claimSeq
	return m.Scan(fields[id].DataTypeOID, fields[id].Format, raw[id], &c.ID) == nil &&
		m.Scan(fields[seq].DataTypeOID, fields[seq].Format, raw[seq], &c.seq) == nil
}

// finite returns t as a time.Time, or now for an infinite or NULL time (a
// producer's created_at when the insert guard was skipped).
func finite(t pgtype.Timestamptz) time.Time {
	if !t.Valid || t.InfinityModifier != pgtype.Finite {
		return time.Now()
	}
	return t.Time
}

// observeClaim records a claim's duration, size and rescued rows.
func (cr *claimRunner) observeClaim(start time.Time, batch []claimedRow) {
	cr.metrics.ClaimDuration.Observe(time.Since(start).Seconds())
	cr.metrics.ClaimRows.Observe(float64(len(batch)))
	rescued := 0
	for i := range batch {
		if batch[i].rescued {
			rescued++
		}
	}
	if rescued > 0 {
		cr.metrics.LeaseRescues.Add(float64(rescued))
		cr.log.Warn("claimed rows whose lease had expired; another relay (or this one) stopped before settling them",
			"num_rescued", rescued)
	}
}

// runMeasured runs the claim statement stmt as runClaim does, measured
// (relay/internal/sampler): in a transaction that reads the statistics
// before and after it. READ COMMITTED whatever the database's default, as
// every claim (inIndexOrder). Rows are returned only once the
// transaction committed: until then their leases are not taken.
func (cr *claimRunner) runMeasured(ctx context.Context, stmt string, args pgx.StrictNamedArgs, req claimRequest) (batch []claimedRow, held []heldKey, err error) {
	tx, err := cr.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, cr.plan); err != nil {
		return nil, nil, fmt.Errorf("set the claim's plan: %w", err)
	}
	err = cr.sampler.Measure(ctx, tx, func() error {
		rows, err := tx.Query(ctx, stmt, planPerExecution, args)
		if err != nil {
			return err
		}
		batch, held, err = cr.readClaimed(rows, req.limit)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return batch, held, nil
}
