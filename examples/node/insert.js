// Record an event in the outbox in the same transaction as the business change.
//
//   npm install --prefix examples/node   # installs pg
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres node examples/node/insert.js
//
// The relay must have created its schema (it does at start, or run
// `outbox-relay migrate`). Run it twice: the second outbox insert is a no-op
// while the first is pending, because the idempotency key is the same.
'use strict';

const { Client } = require('pg');

async function main() {
  const client = new Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  try {
    // Setup for this example only: the business table and an order to pay.
    await client.query('CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, status text NOT NULL)');
    await client.query("INSERT INTO orders (id, status) VALUES (42, 'new') ON CONFLICT (id) DO NOTHING");

    await client.query('BEGIN');
    try {
      await client.query("UPDATE orders SET status = 'paid' WHERE id = $1", [42]);
      const res = await client.query(
        'INSERT INTO outbox.messages (topic, payload, key, headers, idempotency_key) ' +
        'VALUES ($1, $2, $3, $4, $5) ON CONFLICT (idempotency_key) DO NOTHING',
        ['orders.paid', Buffer.from(JSON.stringify({ order_id: 42 })), 'order-42',
         JSON.stringify({ 'content-type': 'application/json' }), 'order-42-paid']);
      await client.query('COMMIT');
      console.log(`order 42 paid; outbox rows inserted: ${res.rowCount}`);
    } catch (err) {
      await client.query('ROLLBACK');
      throw err;
    }
  } finally {
    await client.end();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
