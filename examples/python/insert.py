"""Record an event in the outbox in the same transaction as the business change.

    pip install "psycopg[binary]"   # or Debian's python3-psycopg
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python3 examples/python/insert.py

The relay must have created its schema (it does at start, or run
`outbox-relay migrate`). Run it twice: the second outbox insert is a no-op
while the first is pending, because the idempotency key is the same.
"""

import json
import os

import psycopg

with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
    # Setup for this example only: the business table and an order to pay.
    conn.execute("CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, status text NOT NULL)")
    conn.execute("INSERT INTO orders (id, status) VALUES (42, 'new') ON CONFLICT (id) DO NOTHING")

    with conn.transaction():
        conn.execute("UPDATE orders SET status = 'paid' WHERE id = %s", (42,))
        cur = conn.execute(
            "INSERT INTO outbox.messages (topic, payload, key, headers, idempotency_key) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (idempotency_key) DO NOTHING",
            ("orders.paid", json.dumps({"order_id": 42}).encode(), "order-42",
             json.dumps({"content-type": "application/json"}), "order-42-paid"))
    print(f"order 42 paid; outbox rows inserted: {cur.rowcount}")
