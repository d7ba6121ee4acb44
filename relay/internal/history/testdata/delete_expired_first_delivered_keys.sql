DELETE FROM "outbox".delivered_keys
 WHERE delivered_at < @before
   AND ctid = ANY (ARRAY(SELECT ctid FROM "outbox".delivered_keys WHERE delivered_at < @before LIMIT @chunk))
