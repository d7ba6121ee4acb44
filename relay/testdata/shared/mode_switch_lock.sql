SET LOCAL lock_timeout = '10s'; LOCK TABLE "outbox".messages_all IN SHARE MODE
