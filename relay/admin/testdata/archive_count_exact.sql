SELECT (SELECT count(*) FROM "outbox".archive) AS archive_rows,
       (SELECT count(*) FROM "outbox".delivered_keys) AS delivered_keys_rows
