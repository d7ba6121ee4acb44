// Package relay moves rows from the outbox table to their sinks: claim →
// deliver → settle, with rescue of expired leases and retention of what was
// delivered.
//
// # The life of a row
//
//	            INSERT (in the application's transaction)
//	                 │
//	                 ▼
//	┌──────────► pending ◄────────────── lease expires (rescue) ─────┐
//	│   (available_at ≤ now: due;                                    │
//	│    > now: delayed or in backoff)                                │
//	│                │ claim: one short transaction,                  │
//	│                │ FOR UPDATE SKIP LOCKED, attempts+1, seq+1,     │
//	│                │ leased_by, leased_until = now + lease          │
//	│                ▼                                                │
//	│             leased ──────────────────────────────────────────────┘
//	│                │ deliver: outside any transaction, one outcome per row
//	│                │ settle: batched, only rows still under this claim
//	│     ┌──────────┼───────────────┬──────────────────┐
//	│  transient   not attempted   delivered          permanent, attempts
//	│  (backoff)   (given back)    or duplicate       exhausted, no sink
//	│     │          │               │                  │
//	└─────┴──────────┘               ▼                  ▼
//	                              archive            dead_letters
//	                         (+ delivered_keys)
//
// A claim writes only columns outside every index (attempts, leased_by,
// leased_until), so it is a HOT update. A row is claimable when it is due
// (available_at ≤ now) and not under an unexpired lease; a relay that dies
// holding rows loses nothing, because its leases expire and any relay claims
// the rows again (counted as lease rescues).
//
// Claims, deliveries and settles run concurrently: two claim loops keep
// claiming while batches come back full and the per-sink in-flight budget
// has room for a whole batch (waiting up to PollInterval for it), and take
// turns while rows trickle in (claimPacer, pacing.go); each batch is split by sink and delivered in its own goroutine;
// settlers write down whatever outcomes have arrived in one round trip (one
// implicit transaction: archive + delivered keys, requeue, dead letters).
// Every settle statement matches (id, claim_seq): each claim increments
// claim_seq and nothing decreases it, so a relay whose lease was taken over
// cannot archive, requeue or dead-letter the row, even by retrying a settle
// whose answer was lost. (attempts cannot serve: a release gives the attempt
// back.) A row claimed more than MaxAttempts times without an outcome, its
// leases expiring each time, is dead-lettered without being sent.
//
// # Guarantees
//
// At least once: a row leaves the hot table only after its sink reported it
// delivered, which sinks do only on a durable acknowledgement. No
// transaction is held across a network call. A row may be delivered twice
// (a relay dies after publishing and before settling; a lease expires under
// a stuck delivery); both copies carry the row's idempotency key, which
// JetStream drops within its duplicate window and consumers can drop by key.
// A row whose idempotency key was already delivered (within the dedup
// retention) is archived as a duplicate without being sent. There is no
// global order: batches are delivered in parallel and retried rows come
// back later. In ordered mode each key's rows are first accepted in id
// order, one at a time; in partitioned mode too, pipelined within a batch.
//
// # Modes
//
// What differs between the delivery modes (Config.Mode) is one value
// behind a small interface (modes.go), one file per mode: which claim loops
// run, how a claimed batch is delivered (at once, or in waves that keep
// each key's order), the fence its settles carry, what a settle sets off,
// the mode's own background work and gauges. The engine (claimloop.go,
// dispatch.go, settle.go, stats.go) calls it and never branches on the
// mode. The final SQL of every mode is in testdata/<mode>/.
//
// # Ordered mode
//
// In ordered mode (ordered.go), a keyed row is claimed only as its key's
// head, its oldest row, in the head's run (the rows that follow it in
// the same claim, which only the claim holding the head can take), or
// behind the key's rows in flight in the claiming relay; deliverInKeyOrder
// sends a key's rows one after the other, so at most one row per key is
// at a sink at a time, across relays (but for a row committed late, with
// an id below rows already claimed). Claims walk the candidates (keyed
// rows not marked waiting) that are due, through an
// index that holds only them: of each key they lease the oldest row with
// its run, and they mark the others waiting, out of that index, while
// holding a KEY SHARE lock on the older row (once that row backs off or
// has been in flight for markWaitingAfter). The settle that deletes a
// key's rows (delivered or dead-lettered) then makes the key's next
// waiting row a candidate, in a statement of its own that sees every mark
// made behind them, and wakes the head claimers, so a key's next rows go as
// soon as the previous ones are settled. Behind a key's rows in flight in
// its own relay, a claim does not wait for their settle: it leases the
// key's next candidate with its run, naming the row in flight it follows
// (relay/internal/keychain, as partitioned mode does), and the relay sends
// them once that row has passed, or releases them unsent when it did not.
// A head that backs off keeps the rows behind it waiting with one write
// to itself. Rows without a key are
// claimed by a loop of their own, from an index that holds only them.
// One claim of heads runs at a time per schema (a transaction-level
// advisory lock, tried: a relay asks first whether another relay's claim
// holds it, and does not run its claim when one does, counting the turn in
// outbox_relay_heads_claims_busy_total; a claim that finds it taken all
// the same takes nothing; either comes back at its next turn), so that
// claims never meet each other's heads half leased. sql_heads.go has the protocol and
// why no row is left waiting behind nothing.
//
// # Partitioned mode
//
// In partitioned mode (partitioned.go), every row belongs to one of 64
// buckets (messages_bucket: its key's hash, or its id when it has none; an
// index built when the schema switches to the mode serves the per-bucket
// claim), and each bucket has at most one owner, recorded in the buckets
// table with an epoch and a lease. Package relay/internal/buckets holds
// the lease protocol: every renewal interval (Lease/10, between 100 ms and
// 1 s) a relay runs one round that renews its buckets, computes its share
// of the 64 over the relays alive and gives up its excess or acquires free
// buckets up to its share, each acquisition incrementing the bucket's
// epoch. At shutdown, once everything is settled, the relay releases every
// bucket.
//
// Fencing: a claim (queryBucketsClaim) takes rows only from the buckets the
// table names this relay as owner of, with the epoch the relay acquired and
// a lease that outlives the rows' lease; a settle touches a row only while
// its bucket is still this relay's under that epoch, its lease unexpired by
// the database's clock (bucketFence), on top of claim_seq. A bucket whose
// lease ran out has no row leases of its old owner left, so its new owner
// may claim its rows at once, and the old owner can neither claim nor settle
// them.
//
// Order: a claim keeps a keyed row only when every older row of its key is
// in the same claim or in flight in this relay (relay/internal/keychain:
// the claim names the row of this relay's that the key's rows follow), and
// deliverInKeyOrder sends a key's row once the row before it, in this
// batch or an earlier one, was acknowledged (a key's rows of one batch go
// in one delivery, a round trip each: sendInRounds); when that row was
// not, the rest of the key is released unsent. A relay runs one claim at a time, so
// that a claim sees the rows its previous claim leased as this relay's. A
// key held back (its oldest row in flight elsewhere, backing off or
// sorting after the others) is left out of the walk and its oldest row
// claimed alone, until this relay settles a row of it.
//
// # Relays and modes
//
// Every relay registers in the relays table at start and records a
// heartbeat every 10 seconds. The schema records its mode (relay_mode):
// a relay whose mode differs refuses to start while a relay of the schema's
// mode is alive (ModeConflictError), and otherwise switches the schema,
// holding producers back while it makes every row a candidate for ordered
// mode (the mode's indexes follow: messages_apply_mode). A relay that
// finds the mode changed under it stops (ModeChangedError).
//
// # Shutdown
//
// When Run's context ends, the relay stops claiming, lets in-flight
// deliveries finish for up to DrainTimeout, then cancels them; rows whose
// delivery did not finish are released (available again, the attempt given
// back), every outcome is settled, and Run returns nil.
package relay
