SELECT pg_advisory_xact_lock_shared(hashtext('outbox-relay rotation "outbox"'))
