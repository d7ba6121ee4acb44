package outbox

// queryMessagesInsert writes a batch of messages in one statement. %[1]s is
// the quoted schema; %[2]s is an optional ON CONFLICT clause. Empty optional
// values arrive as NULL and take the column defaults.
const queryMessagesInsert = `
INSERT INTO %[1]s.messages (topic, payload, key, headers, idempotency_key, destination, available_at)
SELECT u.topic, u.payload, u.key, u.headers,
       coalesce(u.idempotency_key, gen_random_uuid()::text),
       u.destination,
       coalesce(u.available_at, now())
  FROM unnest($1::text[], $2::bytea[], $3::text[], $4::jsonb[], $5::text[], $6::text[], $7::timestamptz[])
       AS u(topic, payload, key, headers, idempotency_key, destination, available_at)
%[2]s`

// onConflictDoNothing skips messages whose idempotency key is already pending.
const onConflictDoNothing = `ON CONFLICT (idempotency_key) DO NOTHING`
