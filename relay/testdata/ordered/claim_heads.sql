WITH patience AS MATERIALIZED (
    SELECT set_config('lock_timeout', @lock_wait, true) AS lock_timeout,
           set_config('idle_in_transaction_session_timeout', '5000', true) AS idle_timeout
     WHERE pg_try_advisory_xact_lock(hashtext(@heads_lock))
), due AS MATERIALIZED (
    SELECT c.id, c.leased_by, c.available_at, CASE WHEN octet_length(c.payload) <= @payload_max::bigint THEN octet_length(c.payload) ELSE 0 END AS size, c.key,
           coalesce(c.destination, @default_sink) AS sink, c.last_error IS NULL AS fresh
      FROM "outbox".messages_all AS c
     WHERE (SELECT lock_timeout FROM patience) IS NOT NULL
       AND c.key IS NOT NULL AND NOT c.waiting
       AND c.available_at <= now()
       AND c.available_at >= @floor::timestamptz
       AND (leased_until IS NULL OR leased_until <= now() OR leased_until > now() + interval '24 hours')
       AND coalesce(c.destination, @default_sink) <> ALL (@closed_sinks::text[])
     ORDER BY c.available_at, c.id
     LIMIT @walk
       FOR NO KEY UPDATE SKIP LOCKED
), oldest AS MATERIALIZED (
    SELECT k.key,
           (SELECT o.id FROM "outbox".messages_all AS o
             WHERE o.key IS NOT NULL AND (o.key, o.id) >= (k.key, (SELECT least(min(w.id), @id_floor::bigint)
                    FROM unnest(@passed_writers::text[]::xid8[], @passed_ids::bigint[]) AS w(x, id)
                   WHERE pg_visible_in_snapshot(w.x, pg_current_snapshot()))) AND (o.key, o.id) <= (k.key, 9223372036854775807)
             ORDER BY o.key, o.id LIMIT 1) AS id
      FROM (SELECT DISTINCT key FROM due) AS k
), blockers AS MATERIALIZED (
    SELECT b.id, b.key, b.leased_by, b.leased_until, b.available_at, b.waiting, b.last_error IS NULL AS fresh
      FROM "outbox".messages_all AS b
     WHERE b.id = ANY (ARRAY(SELECT id FROM oldest WHERE id IS NOT NULL EXCEPT SELECT id FROM due))
       FOR KEY SHARE SKIP LOCKED
), continued AS MATERIALIZED (
    SELECT d.id, d.leased_by, d.available_at, d.size, d.key, d.sink, d.fresh, p.id AS after
      FROM (SELECT DISTINCT ON (d.key) d.*, b.id AS oldest
              FROM due AS d
              JOIN blockers AS b ON b.key = d.key
             WHERE b.leased_by = @relay_id AND b.leased_until > now() AND b.leased_until <= now() + interval '24 hours' AND b.fresh
               AND @keys_in_flight::jsonb ? d.key
             ORDER BY d.key, d.id) AS d
     CROSS JOIN LATERAL (
           SELECT o.id, (o.leased_by = @relay_id AND o.leased_until > now() AND o.leased_until <= now() + interval '24 hours') IS TRUE AS ours
             FROM "outbox".messages_all AS o
            WHERE o.key IS NOT NULL AND (o.key, o.id) < (d.key, d.id) AND (o.key, o.id) >= (d.key, d.oldest)
            ORDER BY o.key DESC, o.id DESC LIMIT 1) AS p
     WHERE p.ours
), beyond AS MATERIALIZED (
    SELECT x.id, x.leased_by, x.available_at, CASE WHEN octet_length(x.payload) <= @payload_max::bigint THEN octet_length(x.payload) ELSE 0 END AS size, x.key,
           coalesce(x.destination, @default_sink) AS sink, x.last_error IS NULL AS fresh, x.waiting, x.leased_until
      FROM "outbox".messages_all AS x
     WHERE x.id = ANY (ARRAY(
           SELECT b.id FROM blockers AS b
            WHERE NOT b.waiting AND b.available_at <= now() AND (leased_until IS NULL OR leased_until <= now() OR leased_until > now() + interval '24 hours')
              AND b.id <> ALL (ARRAY(SELECT id FROM due))))
       FOR NO KEY UPDATE SKIP LOCKED
), heads AS MATERIALIZED (
    SELECT d.id, d.leased_by, d.available_at, d.size, d.key, d.sink, d.fresh
      FROM due AS d
     WHERE d.id = ANY (ARRAY(SELECT id FROM oldest))
     UNION ALL
    SELECT x.id, x.leased_by, x.available_at, x.size, x.key, x.sink, x.fresh
      FROM beyond AS x
     WHERE x.key IS NOT NULL AND NOT x.waiting AND x.available_at <= now() AND (leased_until IS NULL OR leased_until <= now() OR leased_until > now() + interval '24 hours')
       AND x.sink <> ALL (@closed_sinks::text[])
     UNION ALL
    SELECT c.id, c.leased_by, c.available_at, c.size, c.key, c.sink, c.fresh
      FROM continued AS c
), followers AS MATERIALIZED (
    SELECT f.id, h.id AS head, h.available_at AS head_at, f.pos, f.size,
           bool_and(f.ok) OVER (PARTITION BY h.id ORDER BY f.pos) AS unbroken
      FROM (SELECT * FROM heads WHERE fresh) AS h
     CROSS JOIN LATERAL (
           SELECT r.id, CASE WHEN octet_length(r.payload) <= @payload_max::bigint THEN octet_length(r.payload) ELSE 0 END AS size,
                  row_number() OVER (ORDER BY r.key, r.id) AS pos,
                  r.available_at <= now() AND (leased_until IS NULL OR leased_until <= now() OR leased_until > now() + interval '24 hours')
                  AND coalesce(r.destination, @default_sink) = h.sink AS ok
             FROM "outbox".messages_all AS r
            WHERE r.key IS NOT NULL AND (r.key, r.id) > (h.key, h.id) AND (r.key, r.id) <= (h.key, 9223372036854775807)
            ORDER BY r.key, r.id
            LIMIT (SELECT ceil(@limit::float8 / greatest(count(*), 1))::bigint - 1 FROM heads)) AS f
), locked AS MATERIALIZED (
    SELECT l.id, l.leased_by, l.available_at <= now() AND (leased_until IS NULL OR leased_until <= now() OR leased_until > now() + interval '24 hours') AS ok
      FROM "outbox".messages_all AS l
     WHERE l.id = ANY (ARRAY(SELECT id FROM followers WHERE unbroken))
       FOR NO KEY UPDATE SKIP LOCKED
), runs AS MATERIALIZED (
    SELECT h.id, h.leased_by, h.size, 0 AS pos, h.available_at AS head_at, h.id AS head
      FROM heads AS h
     UNION ALL
    SELECT s.id, s.leased_by, s.size, s.pos, s.head_at, s.head FROM (
        SELECT v.*, count(*) FILTER (WHERE v.ok) OVER (PARTITION BY v.head ORDER BY v.pos) = v.pos AS unbroken
          FROM (SELECT u.id, max(u.leased_by) AS leased_by, max(u.size) AS size, max(u.pos) AS pos,
                       max(u.head_at) AS head_at, max(u.head) AS head, bool_or(u.ok) AS ok
                  FROM (SELECT f.id, NULL AS leased_by, f.size, f.pos, f.head_at, f.head, false AS ok
                          FROM followers AS f
                         WHERE f.unbroken
                         UNION ALL
                        SELECT l.id, l.leased_by, NULL, NULL, NULL, NULL, l.ok
                          FROM locked AS l) AS u
                 GROUP BY u.id) AS v) AS s
     WHERE s.unbroken
), claimable AS MATERIALIZED (
    SELECT id, leased_by FROM (
        SELECT id, leased_by,
               sum(size) OVER w AS upto,
               row_number() OVER w AS n
          FROM runs
        WINDOW w AS (ORDER BY pos, head_at, head)) AS s
     WHERE n <= @limit AND (upto <= @byte_budget::bigint OR (n = 1 AND @oversized::bool))
), blocked AS MATERIALIZED (
    SELECT o.key, b.id
      FROM oldest AS o
      JOIN blockers AS b ON b.id = o.id
     WHERE b.id <> ALL (ARRAY(SELECT id FROM due))
       AND b.id <> ALL (ARRAY(SELECT id FROM heads))
       AND o.key <> ALL (ARRAY(SELECT key FROM continued))
       AND NOT coalesce(b.leased_until > now() + @lease::interval - @mark_after::interval
                        AND b.leased_until <= now() + @lease::interval, false)
), marked AS (
    UPDATE "outbox".messages_all AS m
       SET waiting = true
     WHERE m.id = ANY (ARRAY(
           SELECT d.id FROM due AS d
             JOIN blocked AS x ON x.key = d.key
            WHERE d.id > x.id))
)
    UPDATE "outbox".messages_all AS m
       SET attempts = least(greatest(m.attempts, 0), 1000000) + 1,
           claim_seq = CASE WHEN m.claim_seq >= 2147483646 OR m.claim_seq < 0 THEN 1 ELSE m.claim_seq + 1 END,
           leased_by = @relay_id,
           leased_until = now() + @lease::interval,
           waiting = false,
           available_at = CASE WHEN m.waiting THEN greatest(m.available_at, clock_timestamp()) ELSE m.available_at END
     WHERE m.id = ANY (ARRAY(SELECT id FROM claimable)) AND (NOT m.waiting OR (SELECT pg_current_xact_id()) IS NOT NULL)
 RETURNING m.id, CASE WHEN octet_length(m.topic) <= 255 THEN m.topic END AS topic, CASE WHEN octet_length(m.payload) <= @payload_max::bigint THEN m.payload END AS payload, CASE WHEN octet_length(m.key) <= 4000 THEN m.key END AS key,
           CASE WHEN pg_column_size(m.headers) <= 256 THEN m.headers
                WHEN octet_length(m.headers::text) <= 16384 THEN m.headers END AS headers,
           CASE WHEN octet_length(m.idempotency_key) <= 800 THEN m.idempotency_key END AS idempotency_key, CASE WHEN octet_length(m.destination) <= 255 THEN m.destination END AS destination,
           m.created_at, m.attempts, m.claim_seq,
           m.id = ANY (ARRAY(SELECT id FROM claimable WHERE leased_by IS NOT NULL)) AS rescued,
           CASE WHEN m.dedup
                THEN (SELECT true FROM "outbox".delivered_keys AS k WHERE k.idempotency_key = m.idempotency_key LIMIT 1) IS NOT NULL
                ELSE false END AS duplicate,
           0 AS bucket,
           CASE WHEN octet_length(m.payload) > @payload_max::bigint THEN 'payload ' || octet_length(m.payload)
                WHEN octet_length(m.topic) > 255 THEN 'topic ' || octet_length(m.topic)
                WHEN octet_length(m.key) > 4000 THEN 'key ' || octet_length(m.key)
                WHEN octet_length(m.idempotency_key) > 800 THEN 'idempotency_key ' || octet_length(m.idempotency_key)
                WHEN octet_length(m.destination) > 255 THEN 'destination ' || octet_length(m.destination)
                WHEN pg_column_size(m.headers) > 256
                     THEN CASE WHEN octet_length(m.headers::text) > 16384 THEN 'headers ' || octet_length(m.headers::text) END
           END AS too_large, NULL::text AS held_key,
           CASE WHEN m.id = ANY (ARRAY(SELECT id FROM continued))
                THEN (SELECT c.after FROM continued AS c WHERE c.id = m.id) END AS after
