SELECT current_setting('autovacuum')::bool,
       coalesce((SELECT bool_and(option_value::bool)
                   FROM pg_catalog.pg_class AS c
                   JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace,
                        pg_catalog.pg_options_to_table(c.reloptions)
                  WHERE n.nspname = @schema_name AND c.oid IN (SELECT relid FROM "outbox".message_generations)
                    AND option_name = 'autovacuum_enabled'), true)
