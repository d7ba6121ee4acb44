SELECT set_config('idle_in_transaction_session_timeout', '5000', true), pg_advisory_xact_lock(hashtext(@lock_name))
