package buckets

import "time"

// Times are a schema's timings, derived from the row lease: every relay of
// a schema must run the same RELAY_LEASE.
type Times struct {
	// Renew is how often a relay renews its buckets, heartbeats and
	// rebalances.
	Renew time.Duration
	// RenewWithin is how close to its end a bucket's lease must be for a
	// round to renew it: the row lease plus three renewals, so that a
	// claim (which needs the bucket's lease to outlive the rows' lease)
	// can go on while a renewal or two is late.
	RenewWithin time.Duration
	// Lease is how long a renewed bucket stays its owner's: RenewWithin
	// plus ten renewals, so that a round writes a bucket's row once every
	// ten or so, not at every round. Each write is a new version of the
	// row that every claim and settle reads, and while another session
	// pins the MVCC horizon none is removed: written at every round, the
	// 64 rows of the buckets table grew by 64 versions a second, and the
	// claims' and settles' reads of it by as much (3,840 versions a
	// minute, 148 pages six minutes into a pin).
	Lease time.Duration
	// Alive is how long a relay counts as alive, sharing the buckets, after
	// its last renewal: as long as its buckets' leases last. Its buckets
	// cannot move sooner anyway, and a relay slowed down (a loaded machine,
	// a long pause for garbage collection) is not taken for gone while it
	// still holds them, which would make the others reach for a share they
	// cannot get and then give it back.
	Alive time.Duration
	// Forming is how long after the relays alive last changed (a relay
	// started, joined or left, as this relay's rounds saw it) its rounds
	// come five times per renewal: ten renewals. Relays of a rolling start
	// come up one after another; the one that holds the buckets sees each
	// newcomer within a fifth of a renewal instead of a whole one, and
	// starts giving up its excess that much sooner.
	Forming time.Duration
}

// TimesFor returns the timings for a row lease.
func TimesFor(rowLease time.Duration) Times {
	renew := min(max(rowLease/10, 100*time.Millisecond), time.Second)
	within := rowLease + 3*renew
	lease := within + 10*renew
	return Times{Renew: renew, RenewWithin: within, Lease: lease, Alive: lease, Forming: 10 * renew}
}
