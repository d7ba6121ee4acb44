-- A trigger messages_rotate moves to the new messages keeps how it fires
-- (issue 43): one of yours set to fire ALWAYS or only as a REPLICA
-- (ALTER TABLE … ENABLE ALWAYS TRIGGER, … ENABLE REPLICA TRIGGER) stays so,
-- as a disabled one stays disabled; version 24 kept only the disabled state,
-- and moved an ALWAYS or REPLICA trigger back to firing as ORIGIN.

-- messages_trigger_definitions returns the statements that make, on
-- <schema>.messages, each trigger of the table rel that moves with the
-- name (every trigger but the internal ones and messages_guard_earlier)
-- as it is: its definition, then its firing state unless it is the
-- default (ORIGIN).
CREATE FUNCTION {{.schema}}.messages_trigger_definitions(rel regclass) RETURNS text[]
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(array_agg(pg_get_triggerdef(t.oid) || CASE t.tgenabled
               WHEN 'D' THEN format('; ALTER TABLE {{.schema}}.messages DISABLE TRIGGER %I', t.tgname)
               WHEN 'A' THEN format('; ALTER TABLE {{.schema}}.messages ENABLE ALWAYS TRIGGER %I', t.tgname)
               WHEN 'R' THEN format('; ALTER TABLE {{.schema}}.messages ENABLE REPLICA TRIGGER %I', t.tgname)
               ELSE '' END ORDER BY t.tgname), '{}')
      FROM pg_trigger AS t
     WHERE t.tgrelid = rel AND NOT t.tgisinternal AND t.tgname <> 'messages_guard_earlier'
$$;
REVOKE EXECUTE ON FUNCTION {{.schema}}.messages_trigger_definitions(regclass) FROM PUBLIC;

-- messages_rotate as in version 24 (the comment there says what it does),
-- the triggers' statements from messages_trigger_definitions.
CREATE OR REPLACE FUNCTION {{.schema}}.messages_rotate(every interval, lock_wait interval)
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
    defs := {{.schema}}.messages_trigger_definitions(cur.relid);
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
