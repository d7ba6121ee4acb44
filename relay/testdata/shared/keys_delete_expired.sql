DELETE FROM "outbox".delivered_keys
 WHERE ctid = ANY (ARRAY(SELECT ctid FROM "outbox".delivered_keys WHERE delivered_at < @cutoff LIMIT @chunk))
