SELECT current_setting('autovacuum')::bool,
       coalesce((SELECT option_value::bool
                   FROM pg_catalog.pg_class AS c
                   JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace,
                        pg_catalog.pg_options_to_table(c.reloptions)
                  WHERE n.nspname = @schema_name AND c.relname = 'messages' AND option_name = 'autovacuum_enabled'), true)
