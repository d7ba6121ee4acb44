package relay

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/internal/liveness"
	"github.com/outbox-relay/outbox-relay/sinks"
)

// The claim side of the relay: a loop that claims batches while there is
// capacity, the capacity check, the claim statement, and the dispatch of
// each batch to its sinks' deliveries (deliver.go).

// claimed is a row this relay leased, with what the claim learned about it.
type claimed struct {
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
}

// tag returns c's claimTag.
func (c *claimed) tag() claimTag {
	return claimTag{seq: c.seq, bucket: c.bucket, epoch: c.epoch, keyed: c.keyed}
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
	// what names the rows it claims, for logs.
	what  string
	claim func(ctx context.Context, req claimRequest) ([]claimed, error)
	// wake, when set, ends a pause at once: a settle made rows claimable.
	wake <-chan struct{}
	// batch, when set, is the most rows per claim; else BatchSize.
	batch int
	// eagerPause, when set, is how long an empty claim waits, rather than
	// PollInterval, while the loop found rows within the last PollInterval.
	eagerPause func() time.Duration
	// follower marks a second loop of the same claim, there for speed:
	// while the relay backs off idle claims (IdlePollInterval), it waits
	// for another loop to find rows rather than poll too.
	follower bool
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
}

// claimLoop claims batches with c and starts their deliveries until ctx
// ends. It claims again at once while batches come back full and capacity
// remains, waits a tenth of PollInterval after a claim that found some rows,
// and PollInterval after an empty one, unless c is woken. It beats live at
// every turn, and its pauses are live's waits.
func (r *Relay) claimLoop(ctx context.Context, deliverCtx context.Context, c claimer, health *claimHealth, live *liveness.Loop) {
	failures := 0
	var failing reminder
	var lastRows time.Time     // when a claim last found rows
	idle := r.cfg.PollInterval // the next pause after an empty claim
	// full is set while claims take every row they may (a backlog), and
	// waiting is when the loop began to wait for room in flight.
	full, waiting := false, time.Time{}
	for ctx.Err() == nil {
		live.Beat()
		// Taken before the claim: a notification, or rows found by another
		// loop, during the claim ends the pause after it.
		notified, found := r.notified.wait(), r.found.wait()
		closed, open := r.sinkStates()
		bytes, oversized := r.inflight.takeBytes(len(r.claimHealth))
		limit, want, atLeast := 0, cmp.Or(c.batch, r.cfg.BatchSize), 1
		if full && r.cfg.MaxInFlight >= 2*want && (waiting.IsZero() || time.Since(waiting) < r.cfg.PollInterval) {
			// Draining a backlog, a claim waits (up to PollInterval) for
			// room for a whole batch rather than take the few rows a
			// settle just freed, while other batches keep the sinks busy:
			// every claim walks the rows in flight and pays its
			// statements, whatever it takes. A 100k drain made 102–104
			// claims, not 124–148, and used 3% less of PostgreSQL's CPU.
			atLeast = want
		}
		if bytes > 0 {
			limit = r.inflight.reserve(open, want, atLeast)
		}
		if limit == 0 {
			if waiting.IsZero() {
				waiting = time.Now()
			}
			r.inflight.addBytes(-bytes)
			// Every sink is unavailable, or one is at capacity (or has
			// no room for a whole batch, above): wait for a settle to free
			// capacity, or poll availability.
			live.Wait()
			waitCtx, cancel := context.WithTimeout(ctx, r.cfg.PollInterval)
			_ = r.inflight.waitFreed(waitCtx)
			cancel()
			continue
		}
		waiting = time.Time{}
		start := time.Now()
		r.pacer.started(c.what, start)
		// The claim is not cut short by shutdown at once: rows it leased
		// are delivered or released by the drain, not left leased until
		// the lease expires. A claim stuck behind a lock gives up after a
		// quarter of the lease, or claimShutdownGrace after shutdown
		// begins, so that a hung database cannot hold the shutdown.
		claimCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Lease/4)
		cutOff := context.AfterFunc(ctx, func() { time.AfterFunc(claimShutdownGrace, cancel) })
		batch, err := c.claim(claimCtx, claimRequest{limit: limit, bytes: bytes, oversized: oversized, closed: closed})
		cutOff()
		cancel()
		used := map[string]int{}
		var claimedBytes int64
		for i := range batch {
			claimedBytes += int64(len(batch[i].Payload))
		}
		r.inflight.addBytes(claimedBytes - bytes)
		if len(batch) > 0 {
			used = r.dispatch(deliverCtx, batch, open, start.Add(DeliveryBudget(r.cfg.Lease)))
		}
		r.inflight.unreserve(open, limit, used)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			health.failed(err)
			r.metrics.ClaimErrors.Inc()
			wait := min(r.cfg.PollInterval<<min(failures, 10), 5*time.Second)
			now := time.Now()
			switch {
			case failing.begin(now):
				r.log.Error("claims fail: nothing is delivered until they work again; retrying", "claiming", c.what,
					"err", redactConnError(err), "retry_in", wait)
			case failing.due(now):
				r.log.Error("claims still fail; retrying", "claiming", c.what, "for", now.Sub(failing.since).Round(time.Second),
					"consecutive_failures", failures, "err", redactConnError(err), "retry_in", wait)
			}
			live.Wait()
			sleep(ctx, wait)
			continue
		}
		if failures > 0 {
			r.log.Info("claiming again after failures", "claiming", c.what, "consecutive_failures", failures,
				"failed_for", failing.end(time.Now()).Round(time.Millisecond))
			failures = 0
		}
		health.succeeded()
		if len(batch) > 0 {
			lastRows = time.Now()
			r.floor.found()
			r.found.wake()
			idle = r.cfg.PollInterval
			r.idlePause.Store(int64(idle))
		}
		full = len(batch) == limit
		live.Wait()
		switch {
		case len(batch) == limit:
			// A full batch: more are waiting, claim again at once.
		case len(batch) > 0:
			// Rows are arriving: look again soon, so that a steady
			// stream is not delayed by a whole poll interval, taking
			// turns with the other loops (claimPacer).
			pause(ctx, r.pacer.afterRows(c.what, start, time.Now(), jittered(r.cfg.PollInterval/10)), c.wake, notified, nil)
		case c.eagerPause != nil && time.Since(lastRows) < r.cfg.PollInterval:
			pause(ctx, jittered(c.eagerPause()), c.wake, notified, nil)
		case c.follower && idle > r.cfg.PollInterval:
			// Idle, and another loop polls: wait for its rows (or a
			// notification), polling only as a safety net.
			pause(ctx, jittered(followerIdlePolls*r.idlePollCap()), c.wake, notified, found)
		default:
			// Nothing found: the pauses grow while nothing is found, up to
			// IdlePollInterval, so that an idle outbox costs little.
			pause(ctx, jittered(idle), c.wake, notified, nil)
			idle = min(2*idle, r.idlePollCap())
			r.idlePause.Store(int64(idle))
		}
	}
}

// idlePollCap is the longest pause after empty claims: IdlePollInterval,
// or ten times it while notifications arrive, as an insert then wakes the
// loops at once. Without backoff (IdlePollInterval = PollInterval) it
// stays PollInterval.
func (r *Relay) idlePollCap() time.Duration {
	if r.cfg.IdlePollInterval > r.cfg.PollInterval && r.notify != nil && r.notify.listening() {
		return 10 * r.cfg.IdlePollInterval
	}
	return r.cfg.IdlePollInterval
}

// sinkStates splits the sinks into those whose rows must not be claimed now
// (unavailable) and those open for a claim, and records their availability.
func (r *Relay) sinkStates() (closed, open []string) {
	closed = []string{}
	for name, s := range r.cfg.Sinks {
		var err error
		if a, ok := s.(sinks.Availability); ok {
			err = a.Available()
		}
		available := err == nil
		if msg, attrs, isErr := r.watches[name].available(time.Now(), err); msg != "" {
			if isErr {
				r.log.Error(msg, append([]any{"sink", name}, attrs...)...)
			} else {
				r.log.Info(msg, append([]any{"sink", name}, attrs...)...)
			}
		}
		r.metrics.SinkAvailable.WithLabelValues(name).Set(boolGauge(available))
		if available {
			open = append(open, name)
		} else {
			closed = append(closed, name)
		}
	}
	return closed, open
}

// claimWith returns a claim that runs stmt, a rendering of
// queryMessagesClaim: it leases up to the request's limit of due rows
// whose sink is not closed, within its byte budget, and returns them in
// insert order.
func (r *Relay) claimWith(stmt string) func(ctx context.Context, req claimRequest) ([]claimed, error) {
	return func(ctx context.Context, req claimRequest) ([]claimed, error) {
		batch, _, err := r.claimRows(ctx, stmt, r.claimArgs(req), req, "claim batch")
		return batch, err
	}
}

// claimArgs returns the arguments every claim statement takes, for req.
func (r *Relay) claimArgs(req claimRequest) pgx.StrictNamedArgs {
	return pgx.StrictNamedArgs{
		"relay_id":     r.cfg.ID,
		"default_sink": r.cfg.DefaultSink,
		"closed_sinks": req.closed,
		"limit":        req.limit,
		"lease":        r.cfg.Lease,
		"byte_budget":  req.bytes,
		"oversized":    req.oversized,
		"payload_max":  r.cfg.payloadMax(),
		"floor":        r.floor.current(),
	}
}

// claimRows runs the claim statement stmt with args for req and returns
// the rows it leased (readClaimed) and the keys it reports without
// claiming their rows, and records the claim (observeClaim). Every claim
// walks its index in order (claimInIndexOrder); one every claimSampleEvery
// is measured as well (claimMeasured). Every error is reported once as
// what failed.
func (r *Relay) claimRows(ctx context.Context, stmt string, args pgx.StrictNamedArgs, req claimRequest, what string) ([]claimed, []heldKey, error) {
	start := time.Now()
	var batch []claimed
	var held []heldKey
	var err error
	if r.claimSampler.due(start) {
		batch, held, err = r.claimMeasured(ctx, stmt, args, req)
	} else {
		batch, held, err = r.claimInIndexOrder(ctx, stmt, args, req.limit)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	r.observeClaim(start, batch)
	return batch, held, nil
}

// claimInIndexOrder runs the claim statement stmt in a transaction whose
// planner walks the indexes in order (queryClaimPlan), in one round trip
// (inPipeline), READ COMMITTED whatever the database's default: a claim's
// locks take the latest version of a row another transaction changed. The
// rows are returned only once the transaction committed: until then their
// leases are not taken.
//
// Every claim runs so, polls of an idle table too: the claim is a prepared
// statement of the connection, parsed once and planned for each
// execution's arguments (the claim plan's plan_cache_mode), where a
// statement run alone (planPerExecution) is parsed, analyzed and planned
// at every execution. Counted with callgrind on PostgreSQL 15 (make
// bench-instructions; the unordered claim, parse to commit): a poll of an
// empty table 1.40 million instructions alone, 0.53 million so; a claim of
// 10 rows past 20 leased ones 2.48 million alone, 1.65 million so
// (docs/benchmarks.md, "The claim and the settle, counted").
func (r *Relay) claimInIndexOrder(ctx context.Context, stmt string, args pgx.StrictNamedArgs, limit int) (batch []claimed, held []heldKey, err error) {
	err = r.inPipeline(ctx, "BEGIN ISOLATION LEVEL READ COMMITTED", []pipelined{{sql: r.q.claimPlan}, {sql: stmt, args: args}}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		batch, held, err = r.readClaimed(rows, limit)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return batch, held, nil
}

// createdAtColumn is where a claim statement returns created_at.
const createdAtColumn = 7

// readClaimed reads the rows of a claim statement. A row whose first column
// is NULL reports a key whose rows were not claimed (a key held back,
// queryBucketsClaim): its last column is the key, its created_at column,
// when set, when to look at it again.
func (r *Relay) readClaimed(rows pgx.Rows, limit int) (batch []claimed, held []heldKey, err error) {
	defer rows.Close()
	batch = make([]claimed, 0, limit)
	for rows.Next() {
		if raw := rows.RawValues(); raw[0] == nil {
			h := heldKey{key: string(raw[len(raw)-1])}
			if raw[createdAtColumn] != nil {
				var until pgtype.Timestamptz
				dest := make([]any, len(raw))
				dest[createdAtColumn] = &until
				if err := rows.Scan(dest...); err == nil {
					h.until = finite(until)
				}
			}
			held = append(held, h)
			continue
		}
		var (
			c                          claimed
			key, destination, emptyKey *string
			topic, idempotencyKey      *string
			tooLarge                   *string
			headers                    []byte
			createdAt                  pgtype.Timestamptz
		)
		err := rows.Scan(&c.ID, &topic, &c.Payload, &key, &headers, &idempotencyKey, &destination,
			&createdAt, &c.Attempt, &c.seq, &c.rescued, &c.duplicate, &c.bucket, &tooLarge, &emptyKey)
		if err == nil && tooLarge == nil {
			c.Topic, c.IdempotencyKey = deref(topic), deref(idempotencyKey)
			c.Headers, err = parseHeaders(headers)
		}
		switch {
		case err == nil && tooLarge != nil:
			// A part larger than the relay reads: the claim left it
			// unread, and the row goes to the dead letters alone.
			// The parts within their limits were read (a key keeps its
			// order's bookkeeping).
			c.unreadable = tooLargeReason(r.cfg, *tooLarge)
			c.Topic, c.IdempotencyKey = deref(topic), deref(idempotencyKey)
		case err != nil:
			// One row the relay cannot read must not stop the others: it
			// is dead-lettered with the reason, the batch goes on.
			if !readIDAndSeq(rows, &c) {
				return nil, nil, fmt.Errorf("read row: %w", err)
			}
			c.unreadable = "the relay cannot read this row: " + err.Error()
		}
		c.CreatedAt = finite(createdAt)
		if key != nil {
			c.Key, c.keyed = *key, true
		}
		c.sink = r.cfg.DefaultSink
		if destination != nil {
			c.Destination = *destination
			c.sink = *destination
			if _, ok := r.cfg.Sinks[c.sink]; !ok {
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
	slices.SortFunc(batch, func(a, b claimed) int { return cmp.Compare(a.ID, b.ID) })
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

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// readIDAndSeq reads the id and claim_seq of the current row alone, for a
// row whose other columns could not be read.
func readIDAndSeq(rows pgx.Rows, c *claimed) bool {
	raw, fields := rows.RawValues(), rows.FieldDescriptions()
	m := rows.Conn().TypeMap()
	return m.Scan(fields[0].DataTypeOID, fields[0].Format, raw[0], &c.ID) == nil &&
		m.Scan(fields[9].DataTypeOID, fields[9].Format, raw[9], &c.seq) == nil
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
func (r *Relay) observeClaim(start time.Time, batch []claimed) {
	r.metrics.ClaimDuration.Observe(time.Since(start).Seconds())
	r.metrics.ClaimRows.Observe(float64(len(batch)))
	rescued := 0
	for i := range batch {
		if batch[i].rescued {
			rescued++
		}
	}
	if rescued > 0 {
		r.metrics.LeaseRescues.Add(float64(rescued))
		r.log.Warn("claimed rows whose lease had expired; another relay (or this one) stopped before settling them",
			"num_rescued", rescued)
	}
}

// dispatch starts one delivery per sink in batch and returns how many rows
// went to each. Sinks in reserved had room taken for the claim; rows for
// other sinks (destinations that name no configured sink) are added to the
// in-flight counts here.
func (r *Relay) dispatch(ctx context.Context, batch []claimed, reserved []string, deadline time.Time) map[string]int {
	bySink := map[string][]claimed{}
	for _, c := range batch {
		bySink[c.sink] = append(bySink[c.sink], c)
	}
	used := make(map[string]int, len(bySink))
	for name, rows := range bySink {
		used[name] = len(rows)
		if !slices.Contains(reserved, name) {
			r.inflight.add(name, len(rows))
		}
		r.metrics.InFlight.WithLabelValues(name).Add(float64(len(rows)))
		r.deliveries.Add(1)
		go r.deliver(ctx, name, rows, deadline)
	}
	return used
}

// jittered spreads d by ±20%, so that idle replicas do not poll in
// lockstep.
func jittered(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// followerIdlePolls is how many of the polling loop's longest pauses a
// follower loop waits while idle, when no loop finds rows.
const followerIdlePolls = 10

// pause waits d, until ctx ends, wake receives, or notified or found is
// closed (a nil channel never is).
func pause(ctx context.Context, d time.Duration, wake, notified, found <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-wake:
	case <-notified:
	case <-found:
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
