-- The hot table rotates (issue 43). Producers keep inserting into
-- <schema>.messages; underneath, three tables take turns being it, each a
-- generation:
--
--   current   the table named messages: producers' rows land in it, and it
--             alone carries the insert guard and the wake-up trigger;
--   draining  a former current table, renamed messages_g<slot>: the relay
--             delivers its rows, and carries the rows that wait (delayed,
--             in backoff, waiting behind their key) into a younger
--             generation; once it holds no row it is emptied with TRUNCATE,
--             which frees its space at once, whatever pins the horizon;
--   spare     an emptied table, messages_g<slot>, ready to become current.
--
-- The relay reads, claims, settles and cancels through messages_all, a
-- table with no rows of its own that the generations holding rows inherit
-- from: a statement through it sees every generation. A spare is taken
-- out of it while it is empty (each statement through messages_all plans,
-- locks and probes every table in it and their indexes: an empty spare
-- would cost them for nothing), and put back when it takes rows. A row keeps its id, key, attempts and
-- available_at when it is carried, so order by id and per-key order hold
-- across generations. relay/internal/rotation has the protocol.
--
-- The existing messages table becomes slot 1's generation, unchanged (no
-- rewrite; adding the parent takes its ACCESS EXCLUSIVE lock a moment).
CREATE TABLE {{.schema}}.messages_all (LIKE {{.schema}}.messages INCLUDING DEFAULTS INCLUDING COMMENTS);
ALTER TABLE {{.schema}}.messages_all ADD CONSTRAINT messages_all_holds_no_rows CHECK (false) NO INHERIT;
COMMENT ON TABLE {{.schema}}.messages_all IS
    'Every generation of the outbox''s rows (messages and its rotated tables): read here; insert into messages.';

-- message_generations: one row per slot. A slot's table keeps its oid for
-- ever; its name is messages while it is current and messages_g<slot>
-- otherwise. generation counts the turns (the current slot has the
-- highest); since is when the slot took its state; id_mark is the last
-- value of the sequence of row ids when it became current: an outbox that
-- took no id since (no insert) does not rotate; analyzed is whether the
-- current generation was analyzed since it became current
-- (messages_analyze).
CREATE TABLE {{.schema}}.message_generations (
    slot integer PRIMARY KEY CHECK (slot BETWEEN 1 AND 3),
    relid regclass NOT NULL UNIQUE,
    generation bigint NOT NULL,
    state text NOT NULL CHECK (state IN ('current', 'draining', 'spare')),
    since timestamptz NOT NULL DEFAULT now(),
    id_mark bigint NOT NULL DEFAULT 0,
    analyzed boolean NOT NULL DEFAULT false
);
CREATE UNIQUE INDEX message_generations_one_current ON {{.schema}}.message_generations (state) WHERE state = 'current';

-- messages_generation_index_prefix names the indexes of a slot's table:
-- messages_<kind> for slot 1 (the indexes the table had), messages_g<slot>_<kind> for the others.
CREATE FUNCTION {{.schema}}.messages_generation_index_prefix(slot integer) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN slot = 1 THEN 'messages' ELSE 'messages_g' || slot END
$$;

DO $$
DECLARE
    s integer;
    t text;
    i record;
    opts text[] := (SELECT c.reloptions FROM pg_class AS c WHERE c.oid = '{{.schema}}.messages'::regclass);
    g record;
BEGIN
    FOR s IN 2 .. 3 LOOP
        t := 'messages_g' || s;
        EXECUTE format('CREATE TABLE {{.schema}}.%I (LIKE {{.schema}}.messages INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMMENTS)', t);
        IF opts IS NOT NULL THEN
            EXECUTE format('ALTER TABLE {{.schema}}.%I SET (%s)', t, array_to_string(opts, ', '));
        END IF;
        -- The same constraints and indexes under the slot's names.
        FOR i IN SELECT c.conname, pg_get_constraintdef(c.oid) AS def
                   FROM pg_constraint AS c
                  WHERE c.conrelid = '{{.schema}}.messages'::regclass AND c.contype IN ('p', 'u') LOOP
            EXECUTE format('ALTER TABLE {{.schema}}.%I ADD CONSTRAINT %I %s', t,
                           regexp_replace(i.conname, '^messages', t), i.def);
        END LOOP;
        FOR i IN SELECT x.relname, pg_get_indexdef(x.oid) AS def
                   FROM pg_index AS ix
                   JOIN pg_class AS x ON x.oid = ix.indexrelid
                  WHERE ix.indrelid = '{{.schema}}.messages'::regclass
                    AND NOT EXISTS (SELECT FROM pg_constraint AS c WHERE c.conindid = ix.indexrelid) LOOP
            EXECUTE regexp_replace(i.def, '^CREATE (UNIQUE )?INDEX \S+ ON \S+ ',
                                   format('CREATE \1INDEX %I ON {{.schema}}.%I ', regexp_replace(i.relname, '^messages', t), t));
        END LOOP;
        EXECUTE format('CREATE TRIGGER messages_guard_earlier BEFORE UPDATE OF available_at ON {{.schema}}.%I
            FOR EACH ROW WHEN (NEW.available_at < OLD.available_at) EXECUTE FUNCTION {{.schema}}.messages_guard_earlier()', t);
        INSERT INTO {{.schema}}.message_generations (slot, relid, generation, state)
        VALUES (s, format('{{.schema}}.%I', t)::regclass, 0, 'spare');
    END LOOP;
    -- Whoever was granted messages is granted messages_all, which the
    -- relay's and the operator's statements name (a statement through it
    -- is checked against its privileges alone). Producers keep theirs on
    -- messages, and the rotation hands them to the next current table.
    FOR g IN SELECT a.privilege_type, a.grantee, a.is_grantable
               FROM pg_class AS c, aclexplode(c.relacl) AS a
              WHERE c.oid = '{{.schema}}.messages'::regclass AND a.grantee <> c.relowner
                AND a.privilege_type IN ('SELECT', 'UPDATE', 'DELETE') LOOP
        EXECUTE format('GRANT %s ON {{.schema}}.messages_all TO %s%s', g.privilege_type,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(g.grantee)) END,
                       CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$$;

ALTER TABLE {{.schema}}.messages INHERIT {{.schema}}.messages_all;
INSERT INTO {{.schema}}.message_generations (slot, relid, generation, state, id_mark)
VALUES (1, '{{.schema}}.messages'::regclass, 1, 'current', (SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END FROM {{.schema}}.messages_id_seq AS s));

-- The mode's indexes on every generation's table.
CREATE OR REPLACE FUNCTION {{.schema}}.messages_apply_mode() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    mode text := (SELECT r.mode FROM {{.schema}}.relay_mode AS r);
    g record;
    p text;
    k text;
BEGIN
    FOR g IN SELECT m.slot, m.relid FROM {{.schema}}.message_generations AS m ORDER BY m.slot LOOP
        p := {{.schema}}.messages_generation_index_prefix(g.slot);
        IF mode = 'ordered' THEN
            IF to_regclass(format('{{.schema}}.%I', p || '_heads_due_idx')) IS NULL THEN
                EXECUTE format('CREATE INDEX %I ON %s (available_at, id) WHERE key IS NOT NULL AND NOT waiting', p || '_heads_due_idx', g.relid);
            END IF;
            IF to_regclass(format('{{.schema}}.%I', p || '_waiting_idx')) IS NULL THEN
                EXECUTE format('CREATE INDEX %I ON %s (key, id) WHERE waiting', p || '_waiting_idx', g.relid);
            END IF;
            IF to_regclass(format('{{.schema}}.%I', p || '_unkeyed_due_idx')) IS NULL THEN
                EXECUTE format('CREATE INDEX %I ON %s (available_at, id) WHERE key IS NULL', p || '_unkeyed_due_idx', g.relid);
            END IF;
        ELSE
            FOREACH k IN ARRAY ARRAY['_heads_due_idx', '_waiting_idx', '_unkeyed_due_idx'] LOOP
                EXECUTE format('DROP INDEX IF EXISTS {{.schema}}.%I', p || k);
            END LOOP;
        END IF;
        IF mode = 'partitioned' THEN
            IF to_regclass(format('{{.schema}}.%I', p || '_bucket_due_idx')) IS NULL THEN
                EXECUTE format('CREATE INDEX %I ON %s ({{.schema}}.messages_bucket(key, id), available_at, id)
                                WHERE {{.schema}}.messages_bucket(key, id) BETWEEN 0 AND 63', p || '_bucket_due_idx', g.relid);
            END IF;
        ELSE
            EXECUTE format('DROP INDEX IF EXISTS {{.schema}}.%I', p || '_bucket_due_idx');
        END IF;
    END LOOP;
END
$$;
REVOKE EXECUTE ON FUNCTION {{.schema}}.messages_apply_mode() FROM PUBLIC;

-- messages_generations reports each slot: its generation, state, table,
-- since when, whether messages_all reads it (attached), and its table's
-- rows (live, dead: the statistics' estimates) and bytes, indexes and
-- TOAST included.
CREATE FUNCTION {{.schema}}.messages_generations()
RETURNS TABLE (slot integer, generation bigint, state text, table_name name, since timestamptz,
               attached boolean, live_rows bigint, dead_rows bigint, total_bytes bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT m.slot, m.generation, m.state, c.relname, m.since,
           EXISTS (SELECT FROM pg_inherits AS i WHERE i.inhrelid = m.relid),
           pg_stat_get_live_tuples(m.relid), pg_stat_get_dead_tuples(m.relid), pg_total_relation_size(m.relid)
      FROM {{.schema}}.message_generations AS m
      JOIN pg_class AS c ON c.oid = m.relid
     ORDER BY m.slot
$$;

-- messages_attach puts a generation's table back into messages_all
-- unless it is there, under an ACCESS EXCLUSIVE lock on messages_all alone
-- (ONLY: not its tables, which producers insert into), which the caller
-- waits for at most its lock_timeout. The lock makes every statement
-- through messages_all either end before the table is in it or be
-- planned after: a statement planned with the tables of before and run
-- with a snapshot taken after would miss the rows of the table put back
-- (the caller moves rows into it, or producers insert into it).
CREATE FUNCTION {{.schema}}.messages_attach(gen regclass) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT FROM pg_inherits AS i WHERE i.inhrelid = gen) THEN
        RETURN false;
    END IF;
    LOCK TABLE ONLY {{.schema}}.messages_all IN ACCESS EXCLUSIVE MODE;
    EXECUTE format('ALTER TABLE %s INHERIT {{.schema}}.messages_all', gen);
    RETURN true;
END
$$;
REVOKE EXECUTE ON FUNCTION {{.schema}}.messages_attach(regclass) FROM PUBLIC;

-- messages_empty empties the oldest draining generation when it holds no
-- row: it takes the table's ACCESS EXCLUSIVE lock, waiting at most
-- lock_wait (busy when it cannot: the next call tries again), looks once
-- more, truncates it, takes it out of messages_all and makes it the
-- spare. It returns the slot emptied
-- (null: none). A session whose snapshot was taken before sees the table
-- empty afterwards (TRUNCATE is not MVCC-safe): it sees no row of that
-- generation, never a wrong one.
CREATE FUNCTION {{.schema}}.messages_empty(lock_wait interval)
RETURNS TABLE (emptied integer, busy boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    g record;
    filled boolean;
BEGIN
    busy := false;
    IF NOT pg_try_advisory_xact_lock(hashtext('outbox-relay rotation {{.schema}}')) THEN
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT m.slot, m.relid INTO g FROM {{.schema}}.message_generations AS m
     WHERE m.state = 'draining' ORDER BY m.generation LIMIT 1;
    IF NOT FOUND THEN
        RETURN NEXT;
        RETURN;
    END IF;
    EXECUTE format('SELECT EXISTS (SELECT FROM %s)', g.relid) INTO filled;
    IF filled THEN
        RETURN NEXT;
        RETURN;
    END IF;
    PERFORM set_config('lock_timeout', greatest(1, (extract(epoch FROM lock_wait) * 1000)::bigint)::text, true);
    BEGIN
        EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', g.relid);
    EXCEPTION WHEN lock_not_available THEN
        busy := true;
        RETURN NEXT;
        RETURN;
    END;
    EXECUTE format('SELECT EXISTS (SELECT FROM %s)', g.relid) INTO filled;
    IF NOT filled THEN
        EXECUTE format('TRUNCATE %s', g.relid);
        EXECUTE format('ALTER TABLE %s NO INHERIT {{.schema}}.messages_all', g.relid);
        UPDATE {{.schema}}.message_generations AS m SET state = 'spare', since = now() WHERE m.slot = g.slot;
        emptied := g.slot;
    END IF;
    RETURN NEXT;
END
$$;
REVOKE EXECUTE ON FUNCTION {{.schema}}.messages_empty(interval) FROM PUBLIC;

-- messages_rotate makes the spare the current table when the current one
-- has been current for every and has had an insert since: in one
-- transaction it renames messages to messages_g<slot> and the spare to
-- messages, and hands over what producers see of messages — their grants
-- (table and column), the table's comment and its triggers other than
-- messages_guard_earlier (the insert guard, the wake-up, any of yours).
-- A producer's insert names messages and lands in the new table (a
-- prepared insert is planned again). It takes both tables' ACCESS
-- EXCLUSIVE locks, waiting at most lock_wait (busy when it cannot: a
-- producer's insert waits behind it no longer than that). It returns the
-- new current generation (null: no rotation).
CREATE FUNCTION {{.schema}}.messages_rotate(every interval, lock_wait interval)
RETURNS TABLE (generation bigint, busy boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    cur record;
    spare record;
    defs text[];
    d text;
    g record;
    note text;
BEGIN
    busy := false;
    IF NOT pg_try_advisory_xact_lock(hashtext('outbox-relay rotation {{.schema}}')) THEN
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT m.slot, m.relid, m.since, m.id_mark, m.generation INTO STRICT cur
      FROM {{.schema}}.message_generations AS m WHERE m.state = 'current';
    SELECT m.slot, m.relid INTO spare FROM {{.schema}}.message_generations AS m WHERE m.state = 'spare' ORDER BY m.slot LIMIT 1;
    IF NOT FOUND OR cur.since + every > now()
       OR (SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END FROM {{.schema}}.messages_id_seq AS s) = cur.id_mark THEN
        RETURN NEXT;
        RETURN;
    END IF;
    PERFORM set_config('lock_timeout', greatest(1, (extract(epoch FROM lock_wait) * 1000)::bigint)::text, true);
    BEGIN
        -- messages_all before its tables, as the relay's statements lock them.
        IF NOT EXISTS (SELECT FROM pg_inherits AS i WHERE i.inhrelid = spare.relid) THEN
            LOCK TABLE ONLY {{.schema}}.messages_all IN ACCESS EXCLUSIVE MODE;
        END IF;
        EXECUTE format('LOCK TABLE %s, %s IN ACCESS EXCLUSIVE MODE', cur.relid, spare.relid);
        PERFORM {{.schema}}.messages_attach(spare.relid);
    EXCEPTION WHEN lock_not_available THEN
        busy := true;
        RETURN NEXT;
        RETURN;
    END;
    -- What producers see of messages, read while it still names the
    -- current table: the definitions say ON <schema>.messages, which names
    -- the new table once the renames are done.
    SELECT array_agg(pg_get_triggerdef(t.oid) || CASE WHEN t.tgenabled = 'D'
               THEN format('; ALTER TABLE {{.schema}}.messages DISABLE TRIGGER %I', t.tgname) ELSE '' END)
      INTO defs FROM pg_trigger AS t
     WHERE t.tgrelid = cur.relid AND NOT t.tgisinternal AND t.tgname <> 'messages_guard_earlier';
    FOR g IN SELECT t.tgname FROM pg_trigger AS t
              WHERE t.tgrelid = cur.relid AND NOT t.tgisinternal AND t.tgname <> 'messages_guard_earlier' LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', g.tgname, cur.relid);
    END LOOP;
    note := obj_description(cur.relid, 'pg_class');
    EXECUTE format('ALTER TABLE %s RENAME TO %I', cur.relid, 'messages_g' || cur.slot);
    EXECUTE format('ALTER TABLE %s RENAME TO messages', spare.relid);
    FOREACH d IN ARRAY coalesce(defs, '{}') LOOP
        EXECUTE d;
    END LOOP;
    EXECUTE format('COMMENT ON TABLE {{.schema}}.messages IS %L', note);
    EXECUTE format('COMMENT ON TABLE %s IS %L', cur.relid,
                   'A former generation of messages: the relay delivers its rows and empties it. Insert into messages.');
    FOR g IN SELECT a.privilege_type, a.grantee, a.is_grantable, NULL::name AS col
               FROM pg_class AS c, aclexplode(c.relacl) AS a
              WHERE c.oid = cur.relid AND a.grantee <> c.relowner
             UNION ALL
             SELECT a.privilege_type, a.grantee, a.is_grantable, t.attname
               FROM pg_attribute AS t, aclexplode(t.attacl) AS a
              WHERE t.attrelid = cur.relid AND t.attacl IS NOT NULL LOOP
        EXECUTE format('GRANT %s%s ON {{.schema}}.messages TO %s%s', g.privilege_type,
                       CASE WHEN g.col IS NULL THEN '' ELSE format(' (%I)', g.col) END,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(g.grantee)) END,
                       CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        EXECUTE format('REVOKE %s%s ON %s FROM %s CASCADE', g.privilege_type,
                       CASE WHEN g.col IS NULL THEN '' ELSE format(' (%I)', g.col) END, cur.relid,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(g.grantee)) END);
    END LOOP;
    UPDATE {{.schema}}.message_generations AS m SET state = 'draining', since = now() WHERE m.slot = cur.slot;
    UPDATE {{.schema}}.message_generations AS m
       SET state = 'current', since = now(), generation = cur.generation + 1, analyzed = false,
           id_mark = (SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END FROM {{.schema}}.messages_id_seq AS s)
     WHERE m.slot = spare.slot;
    generation := cur.generation + 1;
    RETURN NEXT;
END
$$;
REVOKE EXECUTE ON FUNCTION {{.schema}}.messages_rotate(interval, interval) FROM PUBLIC;

-- messages_carry_candidate is messages_carry's condition on a row of the
-- oldest draining generation, as SQL text for the alias r.
CREATE FUNCTION {{.schema}}.messages_carry_candidate() RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT $c$(r.leased_until IS NULL OR r.leased_until < now())
                      AND CASE WHEN r.waiting
                               THEN NOT EXISTS (
                                   SELECT FROM {{.schema}}.messages_all AS o
                                    WHERE o.key = r.key AND o.id < r.id
                                      AND (o.leased_until >= now() OR (NOT o.waiting AND o.available_at <= now() + interval '1 minute')))
                               ELSE r.available_at > now() END$c$
$$;

-- messages_carry moves up to chunk rows that wait out of the oldest
-- draining generation, once it has been draining for settle (its rows due
-- then have mostly been delivered: what is left is what waits), into the other table that is not current (the
-- spare, or a younger draining generation), so that the oldest can be
-- emptied: rows not leased (or whose lease ran out) that are not due yet
-- (delayed, in backoff), and, in ordered mode, rows waiting behind an
-- older row of their key when no older row of the key is leased or due
-- within a minute. A waiting row is made a candidate by the settle of
-- the row before it, which updates it where it finds it: while that row
-- may be claimed, delivered and settled, the waiting row stays put. Rows
-- due now are left to the claims, which take the oldest first. A row
-- keeps every column, its id included. A spare that is to take rows is
-- put back into messages_all first, by a call of its own (messages_attach;
-- its lock waited for at most lock_wait: busy when it cannot), which
-- returns attached and moves nothing: the next call moves them. It returns
-- the rows moved.
CREATE FUNCTION {{.schema}}.messages_carry(chunk integer, lock_wait interval, settle interval)
RETURNS TABLE (carried bigint, attached boolean, busy boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    src regclass;
    dst regclass;
    waits boolean;
BEGIN
    carried := 0;
    attached := false;
    busy := false;
    IF NOT pg_try_advisory_xact_lock(hashtext('outbox-relay rotation {{.schema}}')) THEN
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT m.relid INTO src FROM {{.schema}}.message_generations AS m
     WHERE m.state = 'draining' AND m.since <= now() - settle ORDER BY m.generation LIMIT 1;
    IF NOT FOUND THEN
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT m.relid INTO STRICT dst FROM {{.schema}}.message_generations AS m
     WHERE m.state <> 'current' AND m.relid <> src;
    IF NOT EXISTS (SELECT FROM pg_inherits AS i WHERE i.inhrelid = dst) THEN
        EXECUTE format($q$SELECT EXISTS (SELECT FROM %1$s AS r WHERE %2$s)$q$, src, {{.schema}}.messages_carry_candidate())
           INTO waits;
        IF NOT waits THEN
            RETURN NEXT;
            RETURN;
        END IF;
        PERFORM set_config('lock_timeout', greatest(1, (extract(epoch FROM lock_wait) * 1000)::bigint)::text, true);
        BEGIN
            attached := {{.schema}}.messages_attach(dst);
        EXCEPTION WHEN lock_not_available THEN
            busy := true;
        END;
        RETURN NEXT;
        RETURN;
    END IF;
    EXECUTE format($q$
        WITH moved AS (
            DELETE FROM %1$s AS d
             WHERE d.id = ANY (ARRAY(
                   SELECT r.id FROM %1$s AS r
                    WHERE %3$s
                      -- Each generation has its own unique idempotency keys: a row
                      -- whose key the target holds (a producer's duplicate of a row
                      -- still pending there) waits here until one of them goes.
                      AND NOT EXISTS (SELECT FROM %2$s AS x WHERE x.idempotency_key = r.idempotency_key)
                    ORDER BY r.id
                    LIMIT $1
                      FOR UPDATE SKIP LOCKED))
            RETURNING d.*)
        INSERT INTO %2$s SELECT * FROM moved$q$, src, dst, {{.schema}}.messages_carry_candidate()) USING chunk;
    GET DIAGNOSTICS carried = ROW_COUNT;
    RETURN NEXT;
END
$$;
REVOKE EXECUTE ON FUNCTION {{.schema}}.messages_carry(integer, interval, interval) FROM PUBLIC;

-- messages_analyze analyzes the current generation once it has taken
-- min_rows row ids since it became current, once per turn: a table that
-- has just become current has no statistics of this turn's rows (those of
-- its last turn at best, none on its first), and the planner would judge
-- the relay's claims by defaults until autovacuum analyzes it (never,
-- where autovacuum is off). ANALYZE takes a SHARE UPDATE EXCLUSIVE lock,
-- which neither producers nor the relay's statements wait for. It returns
-- whether it analyzed.
CREATE FUNCTION {{.schema}}.messages_analyze(min_rows bigint)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    cur record;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('outbox-relay rotation {{.schema}}')) THEN
        RETURN false;
    END IF;
    SELECT m.slot, m.relid INTO cur FROM {{.schema}}.message_generations AS m
     WHERE m.state = 'current' AND NOT m.analyzed
       AND (SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END FROM {{.schema}}.messages_id_seq AS s) - m.id_mark >= min_rows;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    EXECUTE format('ANALYZE %s', cur.relid);
    UPDATE {{.schema}}.message_generations AS m SET analyzed = true WHERE m.slot = cur.slot;
    RETURN true;
END
$$;
REVOKE EXECUTE ON FUNCTION {{.schema}}.messages_analyze(bigint) FROM PUBLIC;
