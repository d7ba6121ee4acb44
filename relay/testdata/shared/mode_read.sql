SELECT (SELECT mode FROM "outbox".relay_mode),
       coalesce((SELECT array_agg(id || ' (' || mode || ')' ORDER BY id) FROM "outbox".relays
                  WHERE id <> $1 AND last_seen > now() - $2::interval AND mode <> $3), '{}')
