DELETE FROM "outbox".archive
 WHERE ctid = ANY (ARRAY(SELECT ctid FROM "outbox".archive WHERE delivered_at < @cutoff LIMIT @chunk))
