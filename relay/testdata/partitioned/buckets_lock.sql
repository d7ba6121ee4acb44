SELECT set_config('idle_in_transaction_session_timeout', @idle_ms::text, true),
       pg_advisory_xact_lock(hashtext(@lock_name))
