// Package rotation rotates a schema's hot table, so that a pinned MVCC
// horizon cannot grow it: delivered rows leave their dead versions in a
// generation that is emptied with TRUNCATE once its rows are gone, which
// frees the space at once, pin or no pin. A Rotator runs the rounds (Run);
// it reports through a logger and Hooks and knows nothing of the engine.
//
// # Why generations
//
// Every delivered row leaves dead versions in the hot table (the claim's
// update, the settle's delete) that vacuum may not remove while another
// session's snapshot is older than them. The claim floor keeps claims from
// walking them, but the table still grows for as long as the pin lasts,
// and keeps the space afterwards. A table that holds no live row can be
// truncated instead: that needs no vacuum and no horizon.
//
// # The layout (migration 24)
//
// Three tables, slots 1 to 3, take turns (message_generations records
// them; each keeps its oid, indexes and grants for ever):
//
//   - the current generation is named messages: producers insert into it
//     as always, and it alone has the insert guard and the wake-up
//     trigger;
//   - a draining generation, named messages_g<slot>, is a former current
//     one whose rows the relay still delivers;
//   - a spare, named messages_g<slot> too, is an emptied table waiting
//     for its turn.
//
// All three inherit from messages_all, which holds no row: the relay's
// statements read, claim, settle and cancel through it, so a row is found
// whichever generation holds it, and claims take the oldest due rows of
// all of them (a Merge Append of the generations' due indexes).
//
// # A round
//
//  1. Carry (messages_carry): once the oldest draining generation has
//     been draining for Every (its due rows mostly delivered by then), its
//     rows that wait — not due yet (delayed, in backoff) or, in ordered mode,
//     waiting behind an older row of their key when no row of that key is
//     leased — and are not leased are moved, a chunk at a time, into the
//     other table that is not current (the spare, or a younger draining
//     generation). Each keeps every column, its id, attempts and
//     available_at included, so claims take rows in the same order and
//     per-key order holds. Rows due now are left to the claims, which take
//     the oldest first; leased rows are left to their settles.
//
//  2. Empty (messages_empty): when the oldest draining generation holds no
//     row, it is locked (ACCESS EXCLUSIVE, waited for at most LockWait),
//     looked at once more, truncated and made the spare.
//
//  3. Rotate (messages_rotate): when the current generation has been
//     current for Every, has had an insert since (an idle outbox does not
//     rotate) and a spare exists, both are locked (at most LockWait) and,
//     in one transaction, messages is renamed messages_g<slot>, the spare
//     renamed messages, and the producers' grants (table and column), the
//     table's comment and its triggers (the guard, the wake-up, any of the
//     operator's, except messages_guard_earlier, which every generation
//     has) move to the new messages.
//
//  4. Analyze (messages_analyze): once the current generation has taken
//     a thousand rows, it is analyzed, once per turn, so that the
//     planner judges the relay's statements by this turn's rows rather
//     than by defaults (a table that has just become current has no
//     statistics of its own rows; where autovacuum is off, nothing else
//     would analyze it).
//
// # The pace
//
// A generation stays current for Every, and a draining one drains for
// Every before its waiting rows are carried. While the oldest holder of
// the database's horizon is older than the current generation
// (Statements.Pinned: its age in transaction ids, from the expression
// Render was given, against the age of the current table's catalog row,
// written by the rotation that made it current), none of the dead
// versions the generation gathers can be vacuumed: then both take
// PinnedEvery (a quarter of Every), rounds come sooner, and the rotator
// logs the change of pace, and again when it ends. A holder younger than
// the current generation does not count: vacuum can still clean what the
// generation gathered before it.
//
// One round at a time per schema (an advisory lock: another relay's call
// meanwhile does nothing). A step that cannot have its locks gives up until
// the next round; after three rounds in a row the rotator warns, and it
// logs when the locks are free again.
//
// # What others see
//
//   - A producer's insert names messages and lands in whichever table is
//     current when it runs; a prepared insert is planned again after a
//     rotation. It waits behind a rotation at most LockWait plus the
//     moment the renames take. A rotation waits for every transaction
//     that inserted into the current table to end; a producer's
//     transaction that stays open longer than LockWait holds it off.
//   - INSERT … ON CONFLICT (idempotency_key) DO NOTHING finds a duplicate
//     key in the current generation only; a duplicate of a row in an
//     older generation is inserted and is dropped at delivery by the
//     delivered keys, as a duplicate delivered twice is.
//   - A session whose snapshot is older than a truncate sees the emptied
//     generation as empty (TRUNCATE is not MVCC-safe): it misses rows that
//     were delivered or carried, never sees a wrong one. A session that
//     read a generation holds a lock on it until its transaction ends,
//     which holds off its truncate (and, for messages, the rotation).
//   - Objects bound to the table rather than its name — a view over
//     messages, a publication, a row-level policy — stay with the table
//     as it becomes messages_g<slot>: point them at messages_all.
package rotation
