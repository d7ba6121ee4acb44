UPDATE "outbox".messages_all AS m SET waiting = false, available_at = greatest(m.available_at, clock_timestamp()) WHERE m.waiting AND (SELECT pg_current_xact_id()) IS NOT NULL
