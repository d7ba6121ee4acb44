package migrations

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// PayloadLimitMax is the largest payload limit: PostgreSQL's limit on a
// value, 1 GiB.
const PayloadLimitMax = 1 << 30

// The payload limit (RELAY_MAX_PAYLOAD_BYTES) is a row trigger on insert,
// messages_payload_limit, whose function holds the limit and whose comment
// records it. Not a check constraint: PostgreSQL checks those on every
// update too, NOT VALID or not, so a claim (an update) of a row written
// before the limit would fail, and with it every claim that walks it.
const payloadLimitTrigger = "messages_payload_limit"

// PayloadLimitSQL returns the statements that refuse, at insert, a payload
// of more than max bytes in schema's messages table, with an error that
// names the limit, creating the trigger when create is set and replacing
// the limit otherwise. Rows already there are not read or checked.
func PayloadLimitSQL(schema string, max int64, create bool) string {
	q, n := Quote(schema), strconv.FormatInt(max, 10)
	var b strings.Builder
	fmt.Fprintf(&b, `CREATE OR REPLACE FUNCTION %s.messages_payload_limit() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF octet_length(NEW.payload) > %s THEN
        RAISE EXCEPTION 'outbox: payload must be at most %s bytes (RELAY_MAX_PAYLOAD_BYTES), not %%', octet_length(NEW.payload)
            USING ERRCODE = 'check_violation', COLUMN = 'payload';
    END IF;
    RETURN NEW;
END
$$;
`, q, n, n)
	if create {
		fmt.Fprintf(&b, "SET LOCAL lock_timeout = '5s';\nCREATE TRIGGER %s BEFORE INSERT ON %s.messages FOR EACH ROW EXECUTE FUNCTION %s.messages_payload_limit();\n",
			payloadLimitTrigger, q, q)
	}
	fmt.Fprintf(&b, "COMMENT ON TRIGGER %s ON %s.messages IS '%s';\n", payloadLimitTrigger, q, n)
	return b.String()
}

// SetPayloadLimit refuses, from now on, inserts into schema's messages
// table whose payload is larger than max bytes (PayloadLimitSQL), unless
// that limit is already set; it reports whether it changed it. A max of 0
// changes nothing. Creating the trigger the first time waits at most 5
// seconds for the table's lock, so that producers never queue behind it
// for longer; replacing the limit takes no lock on the table.
func SetPayloadLimit(ctx context.Context, conn *pgx.Conn, schema string, max int64) (bool, error) {
	if max == 0 {
		return false, nil
	}
	if max < 0 || max > PayloadLimitMax {
		return false, fmt.Errorf("payload limit %d: want 1 to %d bytes", max, PayloadLimitMax)
	}
	var recorded *string
	err := conn.QueryRow(ctx, `
SELECT pg_catalog.obj_description(g.oid, 'pg_trigger') FROM pg_catalog.pg_trigger AS g
  JOIN pg_catalog.pg_class AS t ON t.oid = g.tgrelid
  JOIN pg_catalog.pg_namespace AS n ON n.oid = t.relnamespace
 WHERE n.nspname = $1 AND t.relname = 'messages' AND g.tgname = $2`, schema, payloadLimitTrigger).Scan(&recorded)
	exists := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("read the payload limit of schema %s: %w", schema, err)
	}
	if exists && recorded != nil && *recorded == strconv.FormatInt(max, 10) {
		return false, nil
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, PayloadLimitSQL(schema, max, !exists))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("set the payload limit of schema %s to %d bytes: %w", schema, max, err)
	}
	return true, nil
}
