SELECT (SELECT mode FROM "outbox".relay_mode),
       coalesce((SELECT array_agg(id || ' (' || mode || ')' ORDER BY id) FROM "outbox".relays
                  WHERE id <> @relay_id AND last_seen > now() - @alive::interval AND mode <> @mode), '{}')
