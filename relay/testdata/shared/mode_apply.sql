SELECT "outbox".messages_apply_mode()
