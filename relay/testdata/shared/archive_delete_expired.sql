DELETE FROM "outbox".archive
 WHERE ctid = ANY (ARRAY(SELECT ctid FROM "outbox".archive WHERE delivered_at < $1 LIMIT $2))
