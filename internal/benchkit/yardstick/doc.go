// Command yardstick is the bare outbox loop that the relay's benchmarks
// are measured against: the speed a relay could reach on this machine,
// database and NATS server, with nothing but the work every outbox relay
// must do. It is a developer tool (make bench, the bench-* targets run it
// through internal/benchkit/benchcmp as the reference loop, "refloop"), not part of
// the shipped binary, and not a design to copy.
//
// What it does, in one process, on the database of -dsn and the NATS
// server of -nats:
//
//   - It creates two tables in -schema (default public), outbox and
//     outbox_archive, with one partial index over the rows not yet claimed
//     (available_at, id), and a JetStream stream YARDSTICK (subjects
//     yardstick.>, file storage, a two-minute duplicate window). It drops
//     and recreates them on every run, but only when they carry its marker
//     (a comment on the tables, the stream's description): it refuses to
//     touch tables or a stream it did not make.
//   - -mode backlog: it loads -n rows of -payload bytes with COPY (every
//     row due at one timestamp with -burst, else one microsecond apart in
//     the order loaded), analyzes the table, then times the drain until a
//     claim comes back empty.
//   - -mode steady: -producers connections insert -n rows at -rate rows a
//     second, -producer-batch rows per transaction in one statement, while
//     the workers drain; it reports p50, p99 and max from each producer
//     commit to the row's JetStream ack.
//   - Each of -workers workers (default 2, as a relay runs two claim loops)
//     holds one connection and loops: claim up to -batch due rows in one
//     statement (its own short transaction) that picks them with FOR UPDATE
//     SKIP LOCKED and records its lease on them (leased_by, leased_until,
//     attempts + 1); publish every claimed row to JetStream asynchronously,
//     its id as Nats-Msg-Id, its topic as the subject, its headers as
//     message headers; await every ack; then, in one statement, delete the
//     rows it still leases and insert them into the archive. It claims
//     again at once after a batch, and waits -poll (default 5ms) after an
//     empty claim.
//   - It prints one JSON line on stdout, the fields of the relay's bench
//     line (events_per_sec, p50_ms, p99_ms, verified, extra, …): verified
//     when the hot table is empty and the archive and the stream hold
//     exactly -n rows. On failure the line is {"name":"yardstick","error":…}
//     and the exit status 1.
//
// What it does not do, so that a ratio against it measures what the
// relay's guarantees and its operability cost: no retries (a failed
// publish or a lost lease ends the run with an error; the rows stay
// leased), no backoff, no dead letters, no rescue of expired leases (the
// lease is recorded, never read), no ordering (rows go out in whatever
// order the claim returns them, and workers overlap), no idempotency keys
// of the producer's choosing (the row's id is the Nats-Msg-Id), no limits
// on what a row holds, no metrics, no health endpoint, no reconnect beyond
// the NATS client's defaults. Nothing it does is out of the relay's reach:
// the same statements' shapes, the same publish and the same settle in
// one statement are open to the relay.
//
// With -workers 0 it runs the backlog's setup, load, ANALYZE and
// verification without a drain: benchcmp subtracts that run's PostgreSQL
// CPU from a full run's to get the drain's.
//
//	go build -o bin/refloop ./internal/benchkit/yardstick
//	bin/refloop -dsn postgres://postgres@127.0.0.1:5432/outbox_bench -nats nats://127.0.0.1:4222 -n 100000
package main
