SELECT id, default_sink, sinks FROM "outbox".relays
 WHERE id <> @relay_id AND last_seen > now() - @alive::interval AND default_sink IS NOT NULL
 ORDER BY id
