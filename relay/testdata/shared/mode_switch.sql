UPDATE "outbox".relay_mode SET mode = $1, changed_at = now(), changed_by = $2
