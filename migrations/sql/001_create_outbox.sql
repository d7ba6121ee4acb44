-- The outbox contract: applications insert into messages; the relay owns every
-- other table and every column after available_at.

-- Headers travel as NATS and HTTP headers: a JSON object whose keys are
-- header names (RFC 9110 tokens) and whose values are strings without line
-- breaks. Anything else is refused at insert time. A domain rather than a
-- table constraint, because a domain is only checked when a value is
-- written to it, not again on every claim of the row.
CREATE DOMAIN {{.schema}}.headers AS jsonb
    CONSTRAINT headers_must_be_a_json_object_of_strings CHECK (
        VALUE IS NULL OR (
            jsonb_typeof(VALUE) = 'object'
            AND NOT jsonb_path_exists(VALUE, '$.* ? (@.type() != "string")', '{}', true)
            AND NOT jsonb_path_exists(VALUE, '$.keyvalue() ? (!(@.key like_regex "^[!#$%&''*+.^_`|~0-9A-Za-z-]+$"))', '{}', true)
            AND NOT jsonb_path_exists(VALUE, '$.* ? (@ like_regex "[\\r\\n]")', '{}', true)
        )
    );

CREATE TABLE {{.schema}}.messages (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic           text        NOT NULL CHECK (topic <> ''),
    payload         bytea       NOT NULL,
    key             text,
    headers         {{.schema}}.headers,
    idempotency_key text        COLLATE "C" NOT NULL DEFAULT gen_random_uuid()::text CHECK (idempotency_key <> ''),
    destination     text,
    available_at    timestamptz NOT NULL DEFAULT now(),
    -- Owned by the relay.
    created_at      timestamptz NOT NULL DEFAULT now(),
    attempts        integer     NOT NULL DEFAULT 0,
    -- Incremented by every claim and never decreased: the fencing token
    -- that a claim's settle must still find (attempts is given back when a
    -- row is released, so it cannot serve).
    claim_seq       integer     NOT NULL DEFAULT 0,
    leased_by       text,
    leased_until    timestamptz,
    last_error      text,
    CONSTRAINT messages_idempotency_key_key UNIQUE (idempotency_key)
) WITH (
    -- A claim only writes columns outside every index (attempts, claim_seq,
    -- leased_by, leased_until), so with room left on each page it is a HOT update:
    -- no index entries are written. A queue table: vacuum early so that
    -- claims never walk long runs of dead tuples, and analyze often so that
    -- plans follow the backlog.
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- Claims walk this index from the oldest due row, skipping rows under an
-- unexpired lease. leased_until stays out of the index so that claims are HOT
-- updates; a lease that expires makes its row claimable again.
CREATE INDEX messages_due_idx ON {{.schema}}.messages (available_at, id);

-- Ordered mode (RELAY_ORDERED) claims a keyed row only when no older row
-- with its key is left: this index answers that per row. key never changes
-- after insert, so claims stay HOT.
CREATE INDEX messages_key_idx ON {{.schema}}.messages (key, id) WHERE key IS NOT NULL;

COMMENT ON TABLE {{.schema}}.messages IS
    'Outbox: insert (topic, payload[, key, headers, idempotency_key, destination, available_at]) in your business transaction; outbox-relay delivers and removes the row.';

-- Delivered rows, kept for RELAY_ARCHIVE_RETENTION.
CREATE TABLE {{.schema}}.archive (
    id              bigint      NOT NULL,
    topic           text        NOT NULL,
    payload         bytea       NOT NULL,
    key             text,
    headers         jsonb,
    idempotency_key text        NOT NULL,
    destination     text,
    created_at      timestamptz NOT NULL,
    attempts        integer     NOT NULL,
    delivered_at    timestamptz NOT NULL DEFAULT now(),
    -- true when the row was not sent because its idempotency key had already
    -- been delivered.
    duplicate       boolean     NOT NULL DEFAULT false
) WITH (autovacuum_vacuum_insert_scale_factor = 0.05);

CREATE INDEX archive_delivered_at_idx ON {{.schema}}.archive USING brin (delivered_at) WITH (autosummarize = on);

-- Idempotency keys of delivered messages, kept for RELAY_DEDUP_RETENTION: a
-- row inserted again with a key found here is archived without being sent.
-- The index is not unique on purpose: a key is recorded once per delivery
-- (a replayed message may be delivered again), and a plain insert costs half
-- of an ON CONFLICT one on the settle path.
CREATE TABLE {{.schema}}.delivered_keys (
    idempotency_key text        COLLATE "C" NOT NULL,
    delivered_at    timestamptz NOT NULL DEFAULT now()
) WITH (autovacuum_vacuum_insert_scale_factor = 0.05);

CREATE INDEX delivered_keys_idempotency_key_idx ON {{.schema}}.delivered_keys USING hash (idempotency_key);

CREATE INDEX delivered_keys_delivered_at_idx ON {{.schema}}.delivered_keys USING brin (delivered_at) WITH (autosummarize = on);

-- Messages that will not be delivered without an operator: permanent
-- failures, exhausted attempts, unknown destinations and cancellations.
CREATE TABLE {{.schema}}.dead_letters (
    id              bigint      PRIMARY KEY,
    topic           text        NOT NULL,
    payload         bytea       NOT NULL,
    key             text,
    headers         jsonb,
    idempotency_key text        NOT NULL,
    destination     text,
    created_at      timestamptz NOT NULL,
    attempts        integer     NOT NULL,
    reason          text        NOT NULL,
    error           text        NOT NULL,
    failed_at       timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX dead_letters_failed_at_idx ON {{.schema}}.dead_letters (failed_at);
