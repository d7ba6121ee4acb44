DELETE FROM "outbox".delivered_keys
 WHERE ctid = ANY (ARRAY(SELECT ctid FROM "outbox".delivered_keys WHERE delivered_at < $1 LIMIT $2))
