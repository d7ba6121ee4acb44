// Package history keeps the relay's history tables, the archive and the
// delivered keys, in partitions by delivery time, so that retention drops
// whole partitions instead of deleting rows. A Keeper adds the partitions
// ahead of time and drops those past retention (Run); it reports through a
// logger and Hooks and knows nothing of the engine.
//
// # Why partitions
//
// Deleting an expired row leaves a dead version that only vacuum removes,
// and vacuum may not remove it while another session's snapshot is older
// than the delete (a pinned MVCC horizon): under an hour's pin, an hour of
// deletes stays in the table and the space stays taken after the pin
// ends. Dropping a partition removes its file at once, pin or no pin, and
// costs no scan of its rows beyond counting them.
//
// # The layout (migrations 21 to 23)
//
// archive and delivered_keys are partitioned by range of delivered_at. The
// first partition, <table>_before_partitions, is the table as it was
// before migration 23, from the beginning of time to the migration's
// cutoff; every later partition spans one width (Width) and is named
// <table>_<lower bound, UTC, YYYYMMDD_HHMMSS>. The relay's statements name
// the partitioned tables, so settles, dedup lookups, replays and the
// console read and write as before.
//
// # A round
//
// Each round (Maintain), for each table:
//
//  1. history_maintain (a function of the schema, run as its owner, since
//     only a table's owner may add or drop its partitions) adds
//     partitions until one ends at least a width past now, from the last
//     one's upper bound, or from a width before now when the relay was
//     away longer; and drops every partition whose upper bound is at
//     least the table's retention old. Adding and dropping a partition
//     each take an ACCESS EXCLUSIVE lock on the partitioned table for a
//     moment: each waits at most LockWait for it (the relay's claims and
//     settles wait behind it no longer) and, when it cannot have it, the
//     round gives up on that table until the next (busy; after three busy
//     rounds in a row the keeper warns, while the partitions added ahead
//     still cover a quarter of a width). One relay at a time per table
//     maintains it (an advisory lock; a round of another relay meanwhile
//     leaves the table to it).
//  2. The first partition's expired rows are deleted in chunks, as the
//     whole table's were before, until it is past retention as a whole
//     and dropped by step 1: retention keeps its promise for the rows
//     archived before the migration too. Every row delivered before the
//     first partition's upper bound lies in it (partitions do not
//     overlap), so the deletes address its rows by ctid through the
//     partitioned table.
//
// A round runs when the relay starts, before it claims, and then every
// Interval, a quarter of a width at most, so that the partition for now
// always exists before it is needed: a settle whose delivered_at no
// partition covers fails (its rows are released and redelivered, not
// lost) and says so in the relay's log.
//
// # What retention means here
//
// A row is kept for at least its table's retention and dropped with its
// partition within one width after that. The archive's partitions are a
// quarter of its retention wide (Width): archived rows are kept at most
// 1.25 times the retention. Each lookup of a delivered key probes every
// partition's hash index (about a microsecond of the database's time
// each, measured: 1.0 µs a lookup that finds nothing in one table, 2.8 to
// 3.3 µs in four partitions, 5.1 to 9.4 µs in seven), so the delivered
// keys' partitions are half their retention wide (LookupWidth): three or
// four partitions, keys remembered at most 1.5 times the retention.
// Keeping rows forever (a retention of zero or less) keeps every
// partition; they are then 30 days wide.
package history
