// Record an event in the outbox in the same transaction as the business change.
//
//   npm install --prefix examples/node   # installs pg
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres node examples/node/insert.js
//
// The relay must have created its schema (it does at start, or run
// `outbox-relay migrate`). Each run pays a new order and records its event
// with idempotency key order-<id>-paid: the key names the business event, so
// a retry of the same transaction is a no-op, and consumers drop a copy they
// already processed by that key.
'use strict';

const { Client } = require('pg');

async function main() {
  const client = new Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  try {
    // Setup for this example only: the business table and a new order.
    await client.query('CREATE TABLE IF NOT EXISTS example_orders ' +
      '(id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, status text NOT NULL)');
    const order = await client.query("INSERT INTO example_orders (status) VALUES ('new') RETURNING id");
    const orderId = Number(order.rows[0].id);

    await client.query('BEGIN');
    try {
      await client.query("UPDATE example_orders SET status = 'paid' WHERE id = $1", [orderId]);
      const res = await client.query(
        'INSERT INTO outbox.messages (topic, payload, key, headers, idempotency_key) ' +
        'VALUES ($1, $2, $3, $4, $5) ON CONFLICT (idempotency_key) DO NOTHING',
        ['orders.paid', Buffer.from(JSON.stringify({ order_id: orderId })), `order-${orderId}`,
         JSON.stringify({ 'content-type': 'application/json' }), `order-${orderId}-paid`]);
      await client.query('COMMIT');
      console.log(`order ${orderId} paid; outbox rows inserted: ${res.rowCount} (idempotency key order-${orderId}-paid)`);
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
