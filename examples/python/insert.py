"""Record an event in the outbox in the same transaction as the business change.

    pip install "psycopg[binary]"   # or Debian's python3-psycopg
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python3 examples/python/insert.py

The relay must have created its schema (it does at start, or run
`outbox-relay migrate`). Each run pays a new order and records its event
with idempotency key order-<id>-paid: the key names the business event, so a
retry of the same transaction is a no-op, and consumers drop a copy they
already processed by that key.
"""

import json
import os

import psycopg

with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
    # Setup for this example only: the business table and a new order.
    conn.execute("CREATE TABLE IF NOT EXISTS example_orders "
                 "(id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, status text NOT NULL)")
    order_id = conn.execute("INSERT INTO example_orders (status) VALUES ('new') RETURNING id").fetchone()[0]

    with conn.transaction():
        conn.execute("UPDATE example_orders SET status = 'paid' WHERE id = %s", (order_id,))
        cur = conn.execute(
            "INSERT INTO outbox.messages (topic, payload, key, headers, idempotency_key) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (idempotency_key) DO NOTHING",
            ("orders.paid", json.dumps({"order_id": order_id}).encode(), f"order-{order_id}",
             json.dumps({"content-type": "application/json"}), f"order-{order_id}-paid"))
    print(f"order {order_id} paid; outbox rows inserted: {cur.rowcount} (idempotency key order-{order_id}-paid)")
