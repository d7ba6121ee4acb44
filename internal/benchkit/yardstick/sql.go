package main

// The yardstick's statements. Every connection's search_path is -schema,
// so they name the tables alone.

// marker is the comment on the yardstick's tables and the description of
// its stream: a run drops and recreates only what carries it.
const marker = "outbox-relay yardstick scratch: dropped and recreated by every yardstick run"

// queryTablesLookup returns, for each of the two tables that exists in the
// schema, its name and comment.
const queryTablesLookup = `
SELECT c.relname, coalesce(obj_description(c.oid, 'pg_class'), '')
  FROM pg_catalog.pg_class AS c
 WHERE c.relnamespace = current_schema()::regnamespace
   AND c.relname IN ('outbox', 'outbox_archive')`

const queryTablesDrop = `DROP TABLE IF EXISTS outbox, outbox_archive`

// queryTablesCreate makes the hot table, its index of the rows nobody
// leases (a claimed row leaves it), and the archive.
const queryTablesCreate = `
CREATE TABLE outbox (
    id           bigserial   PRIMARY KEY,
    topic        text        NOT NULL,
    payload      bytea       NOT NULL,
    headers      jsonb       NOT NULL DEFAULT '{}',
    available_at timestamptz NOT NULL DEFAULT now(),
    leased_by    text,
    leased_until timestamptz,
    attempts     int         NOT NULL DEFAULT 0
);
CREATE INDEX outbox_unleased ON outbox (available_at, id) WHERE leased_by IS NULL;
CREATE TABLE outbox_archive (
    id           bigint      PRIMARY KEY,
    topic        text        NOT NULL,
    payload      bytea       NOT NULL,
    headers      jsonb       NOT NULL,
    available_at timestamptz NOT NULL,
    attempts     int         NOT NULL,
    delivered_at timestamptz NOT NULL
);
COMMENT ON TABLE outbox IS '` + marker + `';
COMMENT ON TABLE outbox_archive IS '` + marker + `'`

// queryOutboxClaim leases up to @batch due rows nobody leases, skipping
// rows another worker is claiming, and returns them.
const queryOutboxClaim = `
UPDATE outbox
   SET leased_by = @worker,
       leased_until = now() + @lease::interval,
       attempts = attempts + 1
 WHERE id = ANY (ARRAY(
           SELECT id
             FROM outbox
            WHERE leased_by IS NULL AND available_at <= now()
            ORDER BY available_at, id
            LIMIT @batch
              FOR UPDATE SKIP LOCKED))
RETURNING id, topic, payload, headers`

// queryOutboxArchive moves the rows of @ids that @worker still leases to
// the archive.
const queryOutboxArchive = `
WITH delivered AS (
    DELETE FROM outbox
     WHERE id = ANY (@ids::bigint[]) AND leased_by = @worker
 RETURNING id, topic, payload, headers, available_at, attempts
)
INSERT INTO outbox_archive (id, topic, payload, headers, available_at, attempts, delivered_at)
SELECT id, topic, payload, headers, available_at, attempts, now()
  FROM delivered`

// queryOutboxInsert is a steady producer's transaction: its rows in one
// statement.
const queryOutboxInsert = `
INSERT INTO outbox (topic, payload, headers)
SELECT @topic, p, h::jsonb
  FROM unnest(@payloads::bytea[], @headers::text[]) AS r(p, h)
RETURNING id`

// queryTablesCount is the verification: rows left in the hot table and
// rows in the archive.
const queryTablesCount = `SELECT (SELECT count(*) FROM outbox), (SELECT count(*) FROM outbox_archive)`
