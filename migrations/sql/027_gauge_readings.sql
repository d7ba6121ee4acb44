-- The gauges' readings, counted once for every relay of the schema
-- (relay/internal/sharedcount): the backlog and table-health counts walk
-- every due row (up to a million) and cost PostgreSQL about as much as
-- claiming them would; each relay used to count them every
-- RELAY_STATS_INTERVAL. Now the relay whose turn it is counts them and
-- stores what it read here, and the others read that.
--
-- One row, made here: counted_at is when the last count began (its
-- transaction's start), counting_until how long the relay counting now
-- keeps the turn (another relay may count once it has passed: the counter
-- died or is slow), counted_by that relay's RELAY_ID, readings what it
-- read (a JSON document of the relay's own; NULL until the first count).
CREATE TABLE {{.schema}}.gauge_readings (
    one            boolean PRIMARY KEY DEFAULT true CHECK (one),
    counted_at     timestamptz NOT NULL DEFAULT '-infinity',
    counting_until timestamptz NOT NULL DEFAULT '-infinity',
    counted_by     text,
    readings       jsonb
);
INSERT INTO {{.schema}}.gauge_readings DEFAULT VALUES;
