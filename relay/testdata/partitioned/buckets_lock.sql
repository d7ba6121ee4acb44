SELECT set_config('idle_in_transaction_session_timeout', $1::text, true),
       pg_advisory_xact_lock(hashtext($2))
