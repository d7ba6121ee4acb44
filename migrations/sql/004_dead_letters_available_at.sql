-- A cancelled row keeps the time it was due, so that `dead retry` of a
-- cancellation puts it back as it was: a row delayed by an hour is still
-- delayed, not due at once.
ALTER TABLE {{.schema}}.dead_letters ADD COLUMN available_at timestamptz;

COMMENT ON COLUMN {{.schema}}.dead_letters.available_at IS
    'For cancelled rows: when the row was due. dead retry keeps it when it is still ahead.';
