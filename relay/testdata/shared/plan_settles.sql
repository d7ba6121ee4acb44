SELECT set_config('enable_bitmapscan', 'off', true),
       set_config('enable_nestloop', 'off', true),
       set_config('enable_seqscan', 'off', true),
       set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('jit', 'off', true)
