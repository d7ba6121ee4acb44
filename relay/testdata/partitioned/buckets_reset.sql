UPDATE "outbox".buckets SET owner = NULL, lease_until = '-infinity', changed_at = now() WHERE owner IS NOT NULL
