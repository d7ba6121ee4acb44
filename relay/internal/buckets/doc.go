// Package buckets is the lease protocol by which the relays of a schema
// share its 64 buckets: at most one owner per bucket, fenced by an epoch,
// with as few moves as the shares allow when relays come and go.
//
// # The table
//
// The buckets table has one row per bucket: its owner (a relay id, or
// NULL), its epoch and the end of its lease. A row's bucket follows from
// its key (messages_bucket: the key's hash, or the row's id when it has
// none), so a key's rows are always in one bucket.
//
// # A round
//
// Every renewal interval (Times.Renew: the row lease / 10, between 100 ms
// and 1 s) an Owner runs one round, in one transaction that holds the
// schema's bucket lock (Lock), so that the relays of a schema rebalance one
// after the other, each seeing the others' changes:
//
//  1. it records that its relay is alive (Config.Heartbeat);
//  2. it renews the leases of the buckets it still holds that end within
//     Times.RenewWithin (the row lease plus three renewals; a lease lasts
//     ten renewals more, so each bucket's row is written about every tenth
//     round: a pinned horizon keeps every version, and claims and settles
//     read them); those it no longer holds (their lease ran out) are lost,
//     and forgotten;
//  3. it reads the relays alive, ordered by id, and computes its share of
//     the 64 (Share: as even as can be, the first ones one more);
//  4. beyond its share it starts giving up its highest buckets: no claim
//     takes their rows any more, and each is released once the claims under
//     way and its rows in flight are settled (or their leases are over);
//  5. short of its share it acquires free buckets (released, or whose lease
//     ran out), each under a new epoch.
//
// Only the excess and the deficit move. A bucket given up is released as
// soon as it drains, not at the next round, and a relay short of its share
// looks again five times per interval. So does a relay whose rounds saw the
// relays alive change within the last ten intervals (Times.Forming): when
// relays start one after another, the one holding the buckets sees each
// newcomer within a fifth of an interval. When Run's context ends (the relay
// has stopped and settled everything) the owner releases every bucket, so
// the others may take them at once; a relay that dies leaves its buckets to
// the others when their leases run out (Times.Lease: the row lease plus
// thirteen renewals, 43 s with the defaults).
//
// # Fencing
//
// The epoch is the fencing token. A claim takes rows only from buckets the
// table names this relay as owner of, under the epoch the State holds and
// with a lease that outlives the rows' lease; a settle touches a row only
// while its bucket is still this relay's under the epoch it was claimed
// under, its lease unexpired by the database's clock. Those checks live in
// the relay's claim and settle statements; this package decides which
// buckets and epochs they present (Claim, Fence). A bucket whose lease ran
// out has no row lease of its old owner left, so its new owner may claim
// its rows at once and the old owner can neither claim nor settle them.
//
// # Why lease rows and not advisory locks
//
// The fence has to be checked inside the claim and settle statements, and
// a session advisory lock is held by whichever client a transaction-pooling
// PgBouncer hands the server connection to next, and released silently
// when a connection drops.
//
// # State and Owner
//
// State is the relay's view of what it owns, pure and without a database:
// the shares of a claim (weighted towards buckets that keep filling theirs,
// rotated so that a small claim still reaches every bucket), the rows in
// flight per bucket, and the reconcile of a round. Owner runs the rounds
// against PostgreSQL and reports through a logger and Hooks.
package buckets
