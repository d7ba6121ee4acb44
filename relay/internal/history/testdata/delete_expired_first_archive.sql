DELETE FROM "outbox".archive
 WHERE delivered_at < @before
   AND ctid = ANY (ARRAY(SELECT ctid FROM "outbox".archive WHERE delivered_at < @before LIMIT @chunk))
