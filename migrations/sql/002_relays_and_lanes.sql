-- Relays that run on this schema, the mode they agree on, and the lanes of
-- ordered mode.

-- The delivery mode every relay on this schema runs: a relay whose mode
-- differs refuses to start while another relay is alive, and switches the
-- schema's mode when it is the only one.
CREATE TABLE {{.schema}}.relay_mode (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    mode       text        NOT NULL CHECK (mode IN ('unordered', 'ordered', 'partitioned')),
    changed_at timestamptz NOT NULL DEFAULT now(),
    changed_by text
);

INSERT INTO {{.schema}}.relay_mode (mode) VALUES ('unordered');

-- One row per relay process, refreshed while it runs (heartbeat): who is
-- alive, with which version and mode. Rows of relays gone for a day are
-- deleted.
CREATE TABLE {{.schema}}.relays (
    id         text        PRIMARY KEY,
    version    text        NOT NULL,
    mode       text        NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    last_seen  timestamptz NOT NULL DEFAULT now()
);

-- Ordered mode (RELAY_ORDERED): one lane per key with pending rows. The
-- relay claims lanes, not rows, and delivers each lane's head (its oldest
-- row): a claim walks only lanes that are due, however many rows wait
-- behind the heads in flight. available_at is when the lane may be looked at
-- again: now when its head was settled, the head's retry time while it backs
-- off, the lease's end while it is in flight (so that an expired lease makes
-- it due again). A lane is deleted once its key has no rows.
CREATE TABLE {{.schema}}.lanes (
    key          text        PRIMARY KEY,
    available_at timestamptz NOT NULL DEFAULT now()
) WITH (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 200,
    autovacuum_vacuum_cost_delay = 0
);

CREATE INDEX lanes_due_idx ON {{.schema}}.lanes (available_at);

-- In ordered mode rows without a key are claimed apart from the lanes, from
-- this index: the main due index also holds the keyed rows waiting behind
-- their heads, which such a claim would walk past.
CREATE INDEX messages_unkeyed_due_idx ON {{.schema}}.messages (available_at, id) WHERE key IS NULL;

-- Opens the lanes of the keys a producer's statement inserted, in ordered
-- mode (a no-op otherwise): it creates missing lanes and holds a KEY SHARE
-- lock on existing ones until the producer commits. The relay deletes a lane
-- only after locking it FOR UPDATE and finding no rows for its key in a
-- snapshot taken after the lock, so a lane the producer holds cannot vanish
-- before the producer's rows are visible. KEY SHARE does not conflict with
-- the relay's updates of available_at, so producers never hold up claims or
-- settles. Lanes are created in key order, so that producers inserting the
-- same new keys cannot deadlock. SECURITY DEFINER: producers need no
-- privilege on the relay's tables.
CREATE FUNCTION {{.schema}}.messages_open_lanes() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    pending text[];
BEGIN
    IF (SELECT mode FROM {{.schema}}.relay_mode) IS DISTINCT FROM 'ordered' THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(DISTINCT key) INTO pending FROM new_rows WHERE key IS NOT NULL;
    WHILE pending IS NOT NULL LOOP
        WITH held AS (
            SELECT key FROM {{.schema}}.lanes WHERE key = ANY (pending) FOR KEY SHARE
        ), opened AS (
            INSERT INTO {{.schema}}.lanes (key)
            SELECT k FROM unnest(pending) AS k WHERE k NOT IN (SELECT key FROM held) ORDER BY k
            ON CONFLICT (key) DO NOTHING
            RETURNING key
        )
        SELECT array_agg(k) INTO pending FROM unnest(pending) AS k
         WHERE k NOT IN (SELECT key FROM held) AND k NOT IN (SELECT key FROM opened);
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER messages_open_lanes AFTER INSERT ON {{.schema}}.messages
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {{.schema}}.messages_open_lanes();

-- Deletes the lanes of candidates whose keys have no rows left, and makes
-- the others due. It locks the lanes first (skipping those a producer holds
-- or another relay is pruning) and only then looks for rows, in a snapshot
-- taken after the lock: rows a producer committed while holding the lane are
-- seen, and a producer that comes later finds the lane gone and opens a new
-- one. It returns the keys of the lanes it deleted.
CREATE FUNCTION {{.schema}}.lanes_prune(candidates text[]) RETURNS text[]
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    locked text[];
    pruned text[];
BEGIN
    SELECT array_agg(key) INTO locked FROM (
        SELECT key FROM {{.schema}}.lanes WHERE key = ANY (candidates) ORDER BY key FOR UPDATE SKIP LOCKED
    ) AS l;
    IF locked IS NULL THEN
        RETURN '{}';
    END IF;
    WITH gone AS (
        DELETE FROM {{.schema}}.lanes AS l
         WHERE l.key = ANY (locked)
           AND NOT EXISTS (SELECT 1 FROM {{.schema}}.messages AS m WHERE m.key = l.key)
     RETURNING l.key
    )
    SELECT coalesce(array_agg(key), '{}') INTO pruned FROM gone;
    UPDATE {{.schema}}.lanes SET available_at = now()
     WHERE key = ANY (locked) AND key <> ALL (pruned);
    RETURN pruned;
END
$$;
