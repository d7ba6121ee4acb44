-- Relays record how far below now their claim floor lies (issue 41), at
-- each heartbeat: what the gauge outbox_relay_claim_floor_lag_seconds says,
-- for `outbox-relay status` and the console, which have no Prometheus to
-- ask. Null until the relay's first floor refresh, and for relays of
-- earlier versions.
ALTER TABLE {{.schema}}.relays ADD COLUMN claim_floor_lag double precision;
