SELECT partition_name, lower_bound, upper_bound
  FROM "outbox".history_partitions(@table::text)
 ORDER BY upper_bound
