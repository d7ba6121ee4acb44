SELECT coalesce({horizon_age} > age(c.xmin), false) AS pinned
  FROM "outbox".message_generations AS m
  JOIN pg_catalog.pg_class AS c ON c.oid = m.relid
 WHERE m.state = 'current'
