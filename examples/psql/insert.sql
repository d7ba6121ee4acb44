-- Record an event in the outbox in the same transaction as the business change.
--
--   psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -f examples/psql/insert.sql
--
-- The relay must have created its schema (it does at start, or run
-- `outbox-relay migrate`). The idempotency key names the business event
-- (order 42 paid), so running the script twice inserts the event once: the
-- second insert is a no-op while the first is pending, and once it was
-- delivered the relay archives a second row as a duplicate. The programs in
-- the other folders pay a new order on each run.

-- Setup for this example only: the business table and an order to pay.
CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, status text NOT NULL);
INSERT INTO orders (id, status) VALUES (42, 'new') ON CONFLICT (id) DO NOTHING;

BEGIN;
UPDATE orders SET status = 'paid' WHERE id = 42;
INSERT INTO outbox.messages (topic, payload, key, headers, idempotency_key)
VALUES ('orders.paid', '{"order_id": 42}', 'order-42',
        '{"content-type": "application/json"}', 'order-42-paid')
ON CONFLICT (idempotency_key) DO NOTHING;
COMMIT;
