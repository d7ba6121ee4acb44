SELECT pg_try_advisory_xact_lock(hashtext(@heads_lock))
