SET LOCAL lock_timeout = '10s'; LOCK TABLE "outbox".messages IN SHARE MODE
