UPDATE "outbox".relay_mode SET mode = @mode, changed_at = now(), changed_by = @relay_id
