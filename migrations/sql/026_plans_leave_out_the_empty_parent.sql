-- Plans through messages_all leave out messages_all itself (issue 42).
--
-- messages_all holds no row (its CHECK (false), migration 24), but a
-- statement that reads the generations through it scanned it too: every
-- scan of messages_all was an Append (or a Merge Append, with a Sort of the
-- empty parent's rows) of the parent and each generation's table. A
-- partitioned claim looks up each key of its batch in messages_all one to
-- three times (the key's oldest row from the id floor, the row before its
-- first row in the claim, the first after it outside the claim), so a
-- claim of 1,000 keyed rows built and ran up to 3,000 of them for nothing.
--
-- The planner leaves a member of an inheritance set out of a plan when the
-- statement's conditions contradict the member's own constraints
-- (constraint_exclusion = partition, the default), but it cannot refute a
-- constant CHECK (false). It can refute a column being null whenever a
-- condition on the column is strict (id = ANY (…), key IS NOT NULL,
-- available_at <= now(), octet_length(payload) >= 0): this constraint,
-- true of no row at all as the NOT NULL columns stand, gives it one for
-- each column the relay's statements select rows by. NO INHERIT (and ONLY)
-- keep it off the generations' tables. A statement with no condition at
-- all (count(*) over every row) still scans the parent, as before.
--
-- Adding it takes messages_all's ACCESS EXCLUSIVE lock a moment (the
-- parent is empty: nothing to check): the relays' statements through
-- messages_all wait meanwhile, producers (who insert into messages) do
-- not. It waits at most 5 s for the lock, behind a long reader of
-- messages_all (a dump, an operator's query); the migration then fails,
-- with the lock timeout's error, and the next start applies it.
SET LOCAL lock_timeout = '5s';
ALTER TABLE ONLY {{.schema}}.messages_all ADD CONSTRAINT messages_all_left_out_of_plans
    CHECK (id IS NULL AND topic IS NULL AND payload IS NULL AND key IS NULL
           AND idempotency_key IS NULL AND destination IS NULL AND available_at IS NULL
           AND created_at IS NULL AND leased_by IS NULL AND leased_until IS NULL
           AND last_error IS NULL AND waiting IS NULL)
    NO INHERIT;
